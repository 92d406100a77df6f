#!/usr/bin/env bash
# Submit the MPI example to a running Corral (`make up`): a launcher and two workers of two
# GPUs each, so `mpirun -np 4` starts two ranks on each worker through its sshd.
# Needs Open MPI and OpenSSH's server on the node (Debian: apt-get install openmpi-bin
# openssh-server) and mpi4py in the virtualenv (`make test` installs it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="$repo/.venv/bin/python"
token="$(cat "${CORRAL_HOME:-$repo/.corral}/admin-token")"
# Quoted for the task's shell: a checkout's path may hold spaces.
sed -e "s#{python}#'$python'#" -e "s#{script}#'$here/allreduce.py'#" "$here/job.json" |
  curl -sS -X POST "http://127.0.0.1:${CORRAL_PORT:-8080}/api/v1/jobs" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary @-
echo
