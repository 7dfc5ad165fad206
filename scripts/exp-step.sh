# Sourced by the one-call experiment scripts (scripts/hopper-exp.sh; an experiment's own
# call script may source it too): `step LABEL LIMIT COMMAND...` runs COMMAND with its
# output in $OUTD/LABEL.log, for at most LIMIT seconds and never past END seconds after
# START (END 0: no end; a killed step still leaves its log), and appends a line (label,
# exit status, seconds) to $TABLE, echoed.
step() { # label timeout command...
    local label=$1 limit=$2
    shift 2
    if [ "$END" -gt 0 ]; then
        local left=$((END - ($(date +%s) - START)))
        [ "$left" -lt "$limit" ] && limit=$((left > 1 ? left : 1))
    fi
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$OUTD/$label.log" 2>&1
    local rc=$?
    printf '%-28s rc=%-4s %5ss\n' "$label" "$rc" "$(($(date +%s) - t0))" | tee -a "$TABLE"
}
