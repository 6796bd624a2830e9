#!/usr/bin/env bash
# Build machine: two small bundles for comparing the verify sampler kernel of
# this tree with the one of an earlier commit on the GPU machine, side by
# side in one run (tools/device/verify_kernel_compare.sh runs them):
#
#   .carry/verify-new  this tree: the verify sampler's GPU test, benchmark
#                      and C entry point (for the peers script)
#   .carry/verify-old  OLD_COMMIT's kernel in this tree's benchmark, so that
#                      both take the same flags (a no-op tuning hook is added
#                      where the old launcher has none)
#   .carry/verify-trace this tree's benchmark with the kernel's phase timing
#                      (--config=verify_phase_trace; the `phases` stage)
#
#   tools/device/verify_kernel_bundles.sh [OLD_COMMIT]   (default 9f3f6a3)
#
# All leave Open MPI and the verdict binary out: nothing here runs under
# mpirun or serves, and the carried paths must fit beside the working tree.
# Carry .carry/verify-new, .carry/verify-old and .whl (and .carry/verify-trace
# for the phases stage; tar the bundles when they do not fit the carry limit).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
old_commit=${1:-9f3f6a3}
export VERDICT_BUNDLE_MPI=0 VERDICT_BUNDLE_VERDICT=0
tools/device/bundle.sh "$root/.carry/verify-new" //kernels:verify_sampler_gpu_test \
  //kernels:draft_sampler_gpu_test //kernels/bench:draft_sampler_benchmark \
  //kernels/bench:verify_sampler_benchmark //kernels/bench:libverdict_verify_sample.so
VERDICT_BUNDLE_BAZEL_ARGS=--config=verify_phase_trace tools/device/bundle.sh \
  "$root/.carry/verify-trace" //kernels/bench:verify_sampler_benchmark

worktree=$(mktemp -d /tmp/verdict-old-XXXXXX)
trap 'git -C "$root" worktree remove --force "$worktree" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$worktree" "$old_commit" >/dev/null
cp kernels/bench/verify_sampler_benchmark.cc kernels/bench/BUILD "$worktree/kernels/bench/"
cp tools/device/bundle.sh "$worktree/tools/device/"
if ! grep -q min_ps "$worktree/kernels/verify_sampler.h"; then
  # The old sampler has no min-p: the benchmark's array is accepted and
  # ignored there (compare min-p runs against the new kernel only).
  sed -i 's|^  const float\* top_ps = nullptr;|&\n  const float* min_ps = nullptr;|' "$worktree/kernels/verify_sampler.h"
fi
if ! grep -q SetTargetTilesPerCta "$worktree/kernels/verify_sampler_launch.h"; then
  # The old launcher has one fixed split: the hook the benchmark calls does
  # nothing there.
  sed -i 's|^}  // namespace verify_internal|void SetTargetTilesPerCta(int32_t tiles);\n\n}  // namespace verify_internal|' \
    "$worktree/kernels/verify_sampler_launch.h"
  cat >>"$worktree/kernels/verify_sampler.cu" <<'EOF'

namespace verdict {
namespace verify_internal {
void SetTargetTilesPerCta(int32_t) {}
}  // namespace verify_internal
}  // namespace verdict
EOF
fi
(cd "$worktree" &&
   tools/device/bundle.sh "$root/.carry/verify-old" //kernels/bench:verify_sampler_benchmark)
(cd "$worktree" && bazel shutdown >/dev/null 2>&1 || true)
du -sh .carry/verify-new .carry/verify-old .carry/verify-trace
