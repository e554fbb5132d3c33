# tools/completion/lind.bash — bash completion for lind (installed by
# `make install` as $(PREFIX)/share/bash-completion/completions/lind).

_lind()
{
    local cur prev cmd
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    cmd=${COMP_WORDS[1]}
    case $prev in
        -m|--model) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --socket|--db|--config|--log-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --backend) COMPREPLY=($(compgen -W "cpu cuda auto" -- "$cur")); return ;;
        --sync) COMPREPLY=($(compgen -W "full normal" -- "$cur")); return ;;
        --template) COMPREPLY=($(compgen -W "none raven world" -f -- "$cur")); return ;;
        -p|--prompt|-n|--temperature|--top-k|--top-p|--seed|--rep-penalty|--rep-window|\
        --after-generate|--segment|--warm|--max-batch|--seconds|--max-resident|--max-message|--max-tokens|\
        --transcript-bytes|--max-output|--prompt-chunk|--max-inflight|--threads) return ;;
    esac
    if ((COMP_CWORD == 1)); then
        COMPREPLY=($(compgen -W "info score generate serve bench-step help --help --version" -- "$cur"))
        return
    fi
    local sampling="--temperature --top-k --top-p --rep-penalty --rep-window --seed"
    case $cmd in
        help) COMPREPLY=($(compgen -W "info score generate serve bench-step" -- "$cur")) ;;
        info) COMPREPLY=($(compgen -W "--model --backend --threads --help" -- "$cur")) ;;
        score)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--model --backend --threads --after-generate --segment $sampling --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -- "$cur"))
            fi ;;
        generate) COMPREPLY=($(compgen -W "--model --backend --threads --prompt -n $sampling --help" -- "$cur")) ;;
        serve) COMPREPLY=($(compgen -W "--config --model --socket --db --backend --threads --log-file --max-batch --max-resident
                   --max-message --max-tokens --sync --transcript-bytes --max-output --prompt-chunk
                   --max-inflight --listen --http --template --help --version" -- "$cur")) ;;
        bench-step) COMPREPLY=($(compgen -W "--model --backend --threads --max-batch --seconds --warm --help" -- "$cur")) ;;
    esac
}
complete -F _lind lind
