# tools/completion/lindctl.bash — bash completion for lindctl (installed by
# `make install` as $(PREFIX)/share/bash-completion/completions/lindctl).
# Commands, their options, and session names asked from the daemon
# (`lindctl sessions ls --json`, quietly: no daemon means no names).

_lindctl_sessions()
{
    local sock=() i
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == --socket || ${COMP_WORDS[i]} == --token-file ]] &&
            sock+=("${COMP_WORDS[i]}" "${COMP_WORDS[i+1]}")
    done
    lindctl "${sock[@]}" sessions ls --json 2>/dev/null |
        grep -o '"session":"[^"]*"' | sed 's/^"session":"//; s/"$//'
}

_lindctl()
{
    local cur prev cmd sub i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --socket|--token-file) ((i++)) ;;
            -*) ;;
            *) if [[ -z $cmd ]]; then cmd=${COMP_WORDS[i]}; elif [[ -z $sub ]]; then sub=${COMP_WORDS[i]}; fi ;;
        esac
    done
    case $prev in
        --socket|--token-file|--csv) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --plot) COMPREPLY=($(compgen -f -X '!*.png' -- "$cur") $(compgen -d -- "$cur")); return ;;
        -n|--max-tokens|--seed|-t|--temperature|--top-k|--top-p|--repetition-penalty|\
        --repetition-window|--stop|--system|--sessions|--tokens|--connections|--windows|\
        --text|--prefix) return ;;
    esac
    if [[ $prev == --template ]]; then COMPREPLY=($(compgen -W "none raven world" -f -- "$cur")); return; fi
    local common="--socket --token-file --help"
    case $cmd in
        "")
            COMPREPLY=($(compgen -W "chat generate sessions stats stress help --socket --token-file --help --version" -- "$cur")) ;;
        help)
            COMPREPLY=($(compgen -W "chat generate sessions stats stress" -- "$cur")) ;;
        chat)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$common -n --max-tokens --seed -t --temperature --top-k --top-p
                    --repetition-penalty --repetition-window --stop --system --template" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_lindctl_sessions)" -- "$cur"))
            fi ;;
        generate)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$common -n --max-tokens --seed -t --temperature --top-k --top-p
                    --repetition-penalty --repetition-window --stop --json -v --verbose" -- "$cur"))
            elif [[ -z $sub ]]; then
                COMPREPLY=($(compgen -W "$(_lindctl_sessions)" -- "$cur"))
            fi ;;
        sessions)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$common --json --prefix --older-than" -- "$cur"))
            elif [[ -z $sub ]]; then
                COMPREPLY=($(compgen -W "ls show rm fork export import gc" -- "$cur"))
            else
                case $sub in
                    show|rm|fork) COMPREPLY=($(compgen -W "$(_lindctl_sessions)" -- "$cur")) ;;
                    export|import)
                        # SESSION first, then FILE
                        local n=0
                        for ((i = 1; i < COMP_CWORD; i++)); do [[ ${COMP_WORDS[i]} != -* ]] && ((n++)); done
                        if ((n == 2)); then COMPREPLY=($(compgen -W "$(_lindctl_sessions)" -- "$cur"))
                        else COMPREPLY=($(compgen -f -- "$cur")); fi ;;
                esac
            fi ;;
        stats)
            COMPREPLY=($(compgen -W "$common --json" -- "$cur")) ;;
        stress)
            COMPREPLY=($(compgen -W "$common --sessions --tokens --connections --windows --text -t
                --temperature --seed --prefix --keep --csv --plot --progress --no-progress --json" -- "$cur")) ;;
    esac
}
complete -F _lindctl lindctl
