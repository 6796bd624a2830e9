#!/usr/bin/env bash
# Checks the command deploy/slurm/verdict.sbatch builds, in dry-run mode with
# the variables Slurm would set.
set -euo pipefail
sbatch_script="$1"
launch="$2"
home=$(cd "$(dirname "$launch")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

bash -n "$sbatch_script" || fail "syntax"
grep -q '^#SBATCH --ntasks-per-node=' "$sbatch_script" || fail "no tasks-per-node directive"
grep -q '^#SBATCH --gpus-per-node=' "$sbatch_script" || fail "no gpus-per-node directive"

run() { env -i PATH="$PATH" SLURM_NTASKS=16 SLURM_JOB_NUM_NODES=2 VERDICT_DRY_RUN=1 "$@"; }

out=$(run VERDICT_BINARY=/opt/verdict bash "$sbatch_script" --model /m 2>/dev/null)
[[ "$out" == "srun --mpi=pmix "* ]] || fail "srun is not the default launcher: $out"
[[ "$out" == *"--distribution=block:block"* ]] || fail "ranks not laid out node by node: $out"
[[ "$out" == *"/opt/verdict serve --tp 16 --host=0.0.0.0 --metrics-port=9400 --metrics-host=0.0.0.0 --model /m"* ]] ||
  fail "bad verdict command: $out"

# The environment the ranks inherit, seen by a stand-in srun: NVLink
# multicast off.
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat > "$fake/srun" <<'FAKE'
#!/usr/bin/env bash
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset} args: $*"
FAKE
chmod +x "$fake/srun"
env_out=$(env -i PATH="$fake:$PATH" SLURM_NTASKS=2 bash "$sbatch_script" 2>/dev/null)
[[ "$env_out" == "NCCL_NVLS_ENABLE=0 args: --mpi=pmix "*" verdict serve --tp 2 "* ]] ||
  fail "srun did not get NCCL_NVLS_ENABLE=0: $env_out"

out=$(run VERDICT_LAUNCHER=mpirun VERDICT_HOME="$home" VERDICT_IFACE=ib0 bash "$sbatch_script" \
      --host 10.0.0.1 --metrics-port=9500 2>/dev/null)
[[ "$out" == "mpirun -np 16 --bind-to none --map-by slot "* ]] || fail "bad mpirun prefix: $out"
[[ "$out" != *"--hostfile"* ]] || fail "a hostfile inside an allocation: $out"
[[ "$out" == *"-x NCCL_NVLS_ENABLE"* ]] || fail "NCCL_NVLS_ENABLE not exported by mpirun: $out"
[[ "$out" == *"--mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0"* ]] ||
  fail "VERDICT_IFACE not passed to launch.sh: $out"
[[ "$out" == *"verdict serve --tp 16 --metrics-host=0.0.0.0 --host 10.0.0.1 --metrics-port=9500 " ]] ||
  fail "caller's --host/--metrics-port not kept alone: $out"

# mpirun across nodes needs the interface named.
if run VERDICT_LAUNCHER=mpirun VERDICT_HOME="$home" bash "$sbatch_script" 2>/dev/null; then
  fail "mpirun across two nodes ran without VERDICT_IFACE"
fi
if env -i PATH="$PATH" VERDICT_DRY_RUN=1 bash "$sbatch_script" 2>/dev/null; then
  fail "ran without SLURM_NTASKS"
fi
if run VERDICT_LAUNCHER=mpirun VERDICT_HOME=/nonexistent bash "$sbatch_script" 2>/dev/null; then
  fail "ran mpirun without deploy/launch.sh"
fi
if run VERDICT_LAUNCHER=ssh bash "$sbatch_script" 2>/dev/null; then
  fail "accepted an unknown launcher"
fi
echo PASS
