# Sourced by the token scripts: TABLE (a dispatch table) and DB (the store that
# holds its winners' verdicts; `matprobe token --table` refuses a winner without
# its PASS there). Given both, they are used; else the GEMV plan is measured on
# this card into $OUT/run.sqlite and its f16 table exported to $OUT/tables.
if [[ -z "${TABLE:-}" || -z "${DB:-}" ]]; then
  DB="$OUT/run.sqlite"
  PYTHONPATH=src python3 -m matprobe run --device cuda --op matmul --op matmul_bias_add \
    --db "$DB" --dispatch "$OUT/tables" > "$OUT/run.txt" 2> "$OUT/run.err"
  TABLE=$(ls "$OUT"/tables/*-f16.json | head -1)
fi
