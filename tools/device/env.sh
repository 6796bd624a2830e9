# Sourced on the GPU machine inside a bundle made by tools/device/bundle.sh:
# points the loader and Open MPI at the bundled libraries.
bundle_root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$bundle_root/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
if [[ -d "$bundle_root/mpi" ]]; then
  mpi_root="$bundle_root/mpi"
  export OPAL_PREFIX="$mpi_root/usr"
  export OPAL_SYSCONFDIR="$mpi_root/etc/openmpi"
  export PMIX_PREFIX="$mpi_root/usr/lib/x86_64-linux-gnu/pmix2"
  export PMIX_PKGLIBDIR="$PMIX_PREFIX/lib/pmix"
  export PMIX_PKGDATADIR="$PMIX_PREFIX/share/pmix"
  export PATH="$mpi_root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$mpi_root/usr/lib/x86_64-linux-gnu:$mpi_root/usr/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH"
  export OMPI_MCA_mtl='^ofi,psm,psm2'
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# NVLink multicast stays off on shared multi-GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
