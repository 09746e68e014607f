#!/usr/bin/env bash
# Regenerates src/graph/generated/ from schemas/*.fbs with flatc 25.12.19.
set -euo pipefail
exec "$(dirname "$0")/check-generated.sh" --write
