# bash completion of probectl: commands and each command's options, as `probectl __complete`
# (probectl.c) names them from the command's own --help; pids and files by bash's defaults.
_probectl() {
    local IFS=$'\n'
    COMPREPLY=($(probectl __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -o bashdefault -F _probectl probectl
