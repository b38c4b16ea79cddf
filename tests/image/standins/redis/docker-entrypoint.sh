#!/bin/sh
# The official redis image's start-up, the part deploy/compose.yaml relies on: options alone run
# redis-server with them, and protected mode is turned off unless a configuration file given first
# sets it (with no configuration file Redis would refuse every client but loopback ones).
set -eu
case ${1:-} in
    -*) set -- redis-server "$@" ;;
esac
if [ "${1:-}" = redis-server ]; then
    shift
    config=
    if [ $# -gt 0 ] && [ -f "$1" ]; then
        config=$1
        shift
    fi
    if [ -z "$config" ] || ! grep -q '^protected-mode' "$config"; then
        set -- --protected-mode no "$@"
    fi
    if [ -n "$config" ]; then
        set -- "$config" "$@"
    fi
    set -- redis-server "$@"
fi
exec "$@"
