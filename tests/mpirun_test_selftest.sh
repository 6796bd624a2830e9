#!/usr/bin/env bash
# Checks mpirun_test.sh itself: it must pass a job that meets its
# expectations and fail one that does not, including a job that hangs.
set -u
launcher=${1:-tests/mpirun_test.sh}
failures=0

# expect_rc RC DESCRIPTION -- LAUNCHER_ARGS...
expect_rc() {
  local want=$1 what=$2
  shift 3
  local out rc
  # The limits below are the launcher's own (sanitizer configurations
  # stretch them for the jobs they run, not for this check of the launcher).
  out=$(VERDICT_TEST_TIME_SCALE=1 "$launcher" "$@" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]]; then
    echo "FAIL: $what: mpirun_test.sh exited $rc, expected $want"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

expect_rc 0 "expected status and output pass" -- \
  --expect-exit=3 --expect-output='^hi$' 2 /bin/sh -c 'echo hi; exit 3'
expect_rc 0 "ranks see the launcher's environment" -- \
  --expect-output='^size 4 nvls 0$' 4 /bin/sh -c 'echo "size $OMPI_COMM_WORLD_SIZE nvls $NCCL_NVLS_ENABLE"'
expect_rc 1 "a wrong exit status fails" -- --expect-exit=3 2 /bin/true
expect_rc 1 "missing output fails" -- --expect-output='^never printed$' 2 /bin/true
expect_rc 1 "a slow job fails --max-seconds" -- --max-seconds=1 2 /bin/sleep 3

start=$(date +%s)
expect_rc 1 "a hung job is killed at --timeout" -- --timeout=3 2 /bin/sleep 600
elapsed=$(( $(date +%s) - start ))
# The timeout plus timeout(1)'s 10 s grace for a job that ignores SIGTERM.
if (( elapsed > 15 )); then
  echo "FAIL: the hung job took ${elapsed}s to end"
  failures=$((failures + 1))
fi

# VERDICT_TEST_TIME_SCALE stretches the limits: a 2 s job meets
# --max-seconds=1 at a scale of 5.
if ! out=$(VERDICT_TEST_TIME_SCALE=5 "$launcher" --max-seconds=1 2 /bin/sleep 2 2>&1); then
  echo "FAIL: the time scale did not stretch --max-seconds"
  echo "$out" | sed 's/^/    /'
  failures=$((failures + 1))
else
  echo "ok: the time scale stretches --max-seconds"
fi

(( failures == 0 )) && echo PASS
exit $(( failures > 0 ))
