#!/usr/bin/env bash
# Launches verdict with mpirun: one rank per GPU, rank 0 serves HTTP.
#
#   deploy/launch.sh --tp N [--hostfile FILE] [--binary PATH] [--dry-run] -- [verdict serve flags]
#
# Ranks map to GPUs by their local rank on each node (rank r on a node uses
# GPU r); with a hostfile, give each node `slots=<GPUs per node>`. The
# environment every rank gets is exported explicitly with -x so that remote
# nodes see it too. NCCL_NVLS_ENABLE=0 keeps NVLink multicast off.
set -euo pipefail

tp=1
hostfile=""
binary="${VERDICT_BINARY:-verdict}"
dry_run=0
while (($#)); do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option $1 (verdict flags go after --)" >&2; exit 2 ;;
  esac
done
if ! [[ "$tp" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch.sh: --tp must be a positive integer, got '$tp'" >&2
  exit 2
fi

export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

cmd=(mpirun -np "$tp" --bind-to none)
if [[ -n "$hostfile" ]]; then
  # --map-by slot fills each node's slots before the next node, so one
  # node's ranks are contiguous and the local rank picks the GPU.
  cmd+=(--hostfile "$hostfile" --map-by slot)
fi
if [[ $(id -u) -eq 0 ]]; then cmd+=(--allow-run-as-root); fi
for var in NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS \
           NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA CUDA_VISIBLE_DEVICES; do
  if [[ -n "${!var:-}" ]]; then cmd+=(-x "$var"); fi
done
cmd+=("$binary" serve --tp "$tp" "$@")

if ((dry_run)); then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
