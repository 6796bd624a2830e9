#!/usr/bin/env bash
# Runs a binary under Open MPI's mpirun on this host and checks the outcome,
# as a test (tools/mpi_test.bzl wraps it in an sh_test; it also runs by hand).
#
#   mpirun_test.sh [options] NP BINARY [ARGS...]
#
# Options:
#   --expect-exit=CODE     mpirun's exit status that passes (default 0)
#   --expect-output=ERE    a line of the output must match (grep -E); repeatable
#   --max-seconds=S        fail if the job takes longer than S (whole) seconds
#   --timeout=S            kill a job still running after S seconds (default
#                          120; under bazel, at most TEST_TIMEOUT - 15)
#
# Both limits are multiplied by VERDICT_TEST_TIME_SCALE (a whole number,
# default 1), which the sanitizer configurations of .bazelrc set: their
# builds run several times slower.
#
# A hung job fails the test with its output instead of hanging it.
set -u

die() { echo "mpirun_test.sh: $*" >&2; exit 2; }

expect_exit=0
max_seconds=""
timeout_s=120
patterns=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --expect-exit=*) expect_exit=${1#*=} ;;
    --expect-output=*) patterns+=("${1#*=}") ;;
    --max-seconds=*) max_seconds=${1#*=} ;;
    --timeout=*) timeout_s=${1#*=} ;;
    --) shift; break ;;
    *) die "unknown option $1" ;;
  esac
  shift
done
[[ $# -ge 2 ]] || die "usage: mpirun_test.sh [options] NP BINARY [ARGS...]"
np=$1
binary=$2
shift 2
[[ $np =~ ^[1-9][0-9]*$ ]] || die "NP must be a positive integer, got '$np'"
[[ -x $binary ]] || die "not an executable: $binary"
[[ $binary == /* ]] || binary=$PWD/$binary
command -v mpirun > /dev/null || die "mpirun not found on PATH"

scale=${VERDICT_TEST_TIME_SCALE:-1}
[[ $scale =~ ^[1-9][0-9]*$ ]] || die "VERDICT_TEST_TIME_SCALE must be a positive integer, got '$scale'"
timeout_s=$(( timeout_s * scale ))
[[ -z $max_seconds ]] || max_seconds=$(( max_seconds * scale ))

# Report a hang ourselves, with the output, before bazel's own timeout kills
# this script.
if [[ -n ${TEST_TIMEOUT:-} ]] && (( TEST_TIMEOUT - 15 < timeout_s )); then
  timeout_s=$(( TEST_TIMEOUT - 15 > 10 ? TEST_TIMEOUT - 15 : 10 ))
fi

# Open MPI keeps its session directory and PMIx sockets under TMPDIR; socket
# paths must stay short (bazel's TEST_TMPDIR is too long), and a private
# directory keeps parallel jobs apart.
session_dir=$(mktemp -d /tmp/mpirun_test.XXXXXX) || die "mktemp failed"
log=$session_dir/output.log
trap 'rm -rf "$session_dir"' EXIT
export TMPDIR=$session_dir

# mpirun refuses root without these (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# NVLink multicast stays off on every machine this project runs on.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# Every rank would otherwise write bazel's test.xml and premature-exit marker
# for this one test.
unset XML_OUTPUT_FILE TEST_PREMATURE_EXIT_FILE TEST_SHARD_STATUS_FILE \
      TEST_TOTAL_SHARDS TEST_SHARD_INDEX

# --oversubscribe: more ranks than cores (CI has 2). --bind-to none: ranks
# sharing cores must not be pinned to the same one. pml ob1 with btl
# self,vader: on-host shared memory only, no network or UCX probing.
# single_copy_mechanism none: CMA needs ptrace rights that containers and
# sandboxes often withhold. Backing files in the private directory, not the
# shared /dev/shm: their names come from the job id, which derives from
# mpirun's pid, and jobs in separate pid namespaces (bazel's sandbox, running
# tests in parallel) get the same pid and would share segments.
mpirun_args=(
  -np "$np"
  --oversubscribe
  --bind-to none
  --mca pml ob1
  --mca btl self,vader
  --mca btl_vader_single_copy_mechanism none
  --mca btl_vader_backing_directory "$session_dir"
  --mca osc_sm_backing_directory "$session_dir"
)

echo "mpirun_test.sh: mpirun ${mpirun_args[*]} $binary $* (timeout ${timeout_s}s)"
start=$(date +%s%N)
# -k: a job that ignores SIGTERM is killed 10 s later.
timeout -k 10 "$timeout_s" mpirun "${mpirun_args[@]}" "$binary" "$@" > "$log" 2>&1 < /dev/null
rc=$?
end=$(date +%s%N)
elapsed_ms=$(( (end - start) / 1000000 ))
elapsed=$(printf '%d.%03d' $(( elapsed_ms / 1000 )) $(( elapsed_ms % 1000 )))
cat "$log"
echo "mpirun_test.sh: mpirun exited with $rc after ${elapsed}s"

failed=0
# timeout(1) exits 124 after SIGTERM, 137 after the SIGKILL that follows.
if [[ $rc == 124 || $rc == 137 ]] && (( elapsed_ms >= timeout_s * 1000 )); then
  echo "FAIL: the job was still running after ${timeout_s}s and was killed"
  exit 1
fi
if [[ $rc != "$expect_exit" ]]; then
  echo "FAIL: expected exit status $expect_exit, got $rc"
  failed=1
fi
if [[ -n $max_seconds ]] && (( elapsed_ms > max_seconds * 1000 )); then
  echo "FAIL: took ${elapsed}s, more than the ${max_seconds}s allowed"
  failed=1
fi
for pattern in ${patterns[@]+"${patterns[@]}"}; do
  if ! grep -Eq -- "$pattern" "$log"; then
    echo "FAIL: no output line matches: $pattern"
    failed=1
  fi
done
(( failed == 0 )) && echo "PASS"
exit "$failed"
