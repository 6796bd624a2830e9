#!/bin/sh
echo "bazel coverage is not supported offline" >&2
exit 1
