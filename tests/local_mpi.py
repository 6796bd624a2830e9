"""Environment for Open MPI jobs that tests start on this host alone.

Shared memory between the ranks, no network probing, and session files in a
short private directory: TEST_TMPDIR paths are too long for Open MPI's
sockets, and jobs of parallel tests must not share segments.
"""

import os
import tempfile


def local_mpi_env(prefix):
    mpi_dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    env = dict(os.environ)
    env.update({
        "TMPDIR": mpi_dir,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_pml": "ob1",
        "OMPI_MCA_btl": "self,vader",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        "OMPI_MCA_btl_vader_backing_directory": mpi_dir,
        "OMPI_MCA_osc_sm_backing_directory": mpi_dir,
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    })
    # Bazel's per-test outputs belong to the test, not to every rank.
    for var in ("XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE"):
        env.pop(var, None)
    return env
