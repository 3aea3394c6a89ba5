#!/bin/sh
# The main job of `make demo`, run inside the test VM with af_sd.ko loaded:
# show the module, create and close AF_SD sockets, connect two processes
# and move data between them, print what happened.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
progs=$top/build/user/tests/progs

echo "== module"
echo "af_sd $(cat /sys/module/af_sd/version) loaded, family $(cat /sys/module/af_sd/parameters/family)"
echo "settings: port_range $(cat /proc/sys/net/sd/port_range), ring_size $(cat /proc/sys/net/sd/ring_size)"

echo "== socket(AF_SD, type, protocol) for each type and a few protocols"
"$progs/sd_socket" probe

echo "== create 1000 AF_SD sockets, then close them"
"$progs/sd_socket" churn 1000
echo "AF_SD sockets in use now: $(awk '$1 == "AF_SD" { print $3 }' /proc/net/protocols)"

echo "== two processes, 8 connections, 64 MiB each way, every byte checked"
"$progs/sd_stress" bytes sd 8 67108864 7
echo "== the same over TCP on loopback"
"$progs/sd_stress" bytes tcp 8 67108864 7

echo "== 2000 connections open at once between two processes"
"$progs/sd_stress" conns sd 2000
echo "AF_SD sockets in use now: $(awk '$1 == "AF_SD" { print $3 }' /proc/net/protocols)"
