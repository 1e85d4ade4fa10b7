#!/usr/bin/env bash
# Pre-publish gate for a checkpoint folder: validate everything, then write (or check) the
# checksum manifest. Exit 0 means "ready to upload".
#
# usage: pre-publish.sh CKPT_DIR [POLICY_JSON]
#   CKPT_DIR     the checkpoint folder to publish
#   POLICY_JSON  optional `ckpt inspect --format json` output of the previous release;
#                any changed per-layer decision (scheme, FSE, padding) fails the gate
# env: CKPT (default: ckpt) the ckpt executable; REPORT_DIR (default: CKPT_DIR/../reports)
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 CKPT_DIR [POLICY_JSON]" >&2
  exit 2
fi
ckpt_dir=$1
policy=${2:-}
ckpt_bin=${CKPT:-ckpt}
report_dir=${REPORT_DIR:-$(dirname "$ckpt_dir")/reports}
mkdir -p "$report_dir"

args=(--strict --scan-weights --junit "$report_dir/validate.xml")
if [ -n "$policy" ]; then
  args+=(--expect-policy "$policy")
fi

echo "== 1/2 validate $ckpt_dir"
# checks ckpt-manifest.json too when the folder has one
"$ckpt_bin" validate "$ckpt_dir" "${args[@]}" --format json > "$report_dir/validate.json" || {
  rc=$?
  "$ckpt_bin" validate "$ckpt_dir" "${args[@]}" --format human || true
  echo "validate failed (exit $rc); report: $report_dir/validate.json" >&2
  exit "$rc"
}

echo "== 2/2 checksum manifest"
if [ -f "$ckpt_dir/ckpt-manifest.json" ]; then
  echo "ckpt-manifest.json present and verified in step 1"
else
  # written only if every check passes; it certifies exactly these bytes
  "$ckpt_bin" validate "$ckpt_dir" --strict --write-manifest --format human
fi

echo "ready to publish: $ckpt_dir (reports in $report_dir)"
# e.g.: huggingface-cli upload my-org/my-model "$ckpt_dir" .
