#!/usr/bin/env bash
# Submit the DDP example to a running Corral (`make up`): two ranks, one GPU each.
# Needs PyTorch in the virtualenv (`make test` installs it; or .venv/bin/pip install torch==2.13.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="$repo/.venv/bin/python"
token="$(cat "${CORRAL_HOME:-$repo/.corral}/admin-token")"
# Quoted for the task's shell: a checkout's path may hold spaces.
sed -e "s#{python}#'$python'#" -e "s#{script}#'$here/train.py'#" "$here/job.json" |
  curl -sS -X POST "http://127.0.0.1:${CORRAL_PORT:-8080}/api/v1/jobs" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary @-
echo
