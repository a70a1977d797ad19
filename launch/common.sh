# Sourced by the launchers: required variables fail early, every command is printed before it
# runs, and DRY_RUN=1 prints the commands without running them.

need() {  # need VAR "what it is, e.g. ..."
  if [ -z "${!1:-}" ]; then
    echo "error: $1 is not set: $2" >&2
    exit 2
  fi
}

show() {  # prints a command the way it will run
  printf '+'
  printf ' %q' "$@"
  printf '\n'
}

run() {
  show "$@"
  if [ "${DRY_RUN:-0}" != 1 ]; then
    "$@"
  fi
}

run_bg() {  # run in the background; the pid goes to BG_PIDS
  show "$@"
  if [ "${DRY_RUN:-0}" != 1 ]; then
    "$@" &
    BG_PIDS+=("$!")
  fi
}
