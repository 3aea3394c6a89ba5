#!/bin/sh
# The main job of `make demo`, run inside the test VM with af_sd.ko loaded:
# show the module, create and close AF_SD sockets, print what happened.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
progs=$top/build/user/tests/progs

echo "== module"
echo "af_sd $(cat /sys/module/af_sd/version) loaded, family $(cat /sys/module/af_sd/parameters/family)"
grep -E '^(protocol|AF_SD)' /proc/net/protocols | cut -c1-40

echo "== socket(AF_SD, type, protocol) for each type and a few protocols"
"$progs/sd_socket" probe

echo "== create 1000 AF_SD sockets, then close them"
"$progs/sd_socket" churn 1000
echo "AF_SD sockets in use now: $(awk '$1 == "AF_SD" { print $3 }' /proc/net/protocols)"
