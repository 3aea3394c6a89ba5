# AF_SD: top-level build.  See README.md and Documentation/testing.rst.
#
#   make                  module and user space (libsd, sdrun, sdctl, tests)
#   make demo             the main job: boot the test VM, load the module, run
#                         redis-benchmark/redis-server and sockperf over TCP
#                         and under sdrun (AF_SD), print a table (guest
#                         figures), sdctl sockets/stats, a TCP client's
#                         fallback and a deny rule; fails if a check fails
#   make check            every test (style, unit, host, VM, other projects'
#                         suites, two hosts, debug-kernel subset), one
#                         summary line
#   make check-debug      the VM suite on the debug kernel (KASAN, lockdep,
#                         kmemleak, ...), built once into a cache outside
#                         the tree; slow (see Documentation/testing.rst)
#   make bench            the benchmark: host part, guest part, two guests;
#                         writes bench/out/ (Documentation/bench.rst)
#   make bench-keep       the last run's report into bench/results/DATE-PLACE.md,
#                         to commit when the run is worth keeping
#   make vm-shell CMD=..  run CMD in the test VM with the module loaded
#   make install modules_install dkms-source dkms-install style clean
#
# The version of everything here is the one in VERSION.

KVER    ?= $(shell scripts/kver 2>/dev/null)
KDIR    ?= /lib/modules/$(KVER)/build
BUILD   ?= $(CURDIR)/build
PREFIX  ?= /usr/local
SD_VERSION := $(shell cat VERSION)
ifeq ($(SD_VERSION),)
$(error no version in $(CURDIR)/VERSION)
endif

USER_BUILD := $(BUILD)/user
# The module's sources (not the generated *.mod.c), for builds from a copy.
KSRC := kernel/Kbuild $(wildcard kernel/*.h) \
	$(filter-out %.mod.c,$(wildcard kernel/*.c))
CMAKE_TYPE ?= RelWithDebInfo

.PHONY: all module user demo check check-unit check-host check-vm style \
	install modules_install dkms-source dkms-install dkms-remove clean vm-shell

all: module user

module:
	@test -d "$(KDIR)" || { echo "no kernel build dir $(KDIR): run scripts/install-deps" >&2; exit 1; }
	$(MAKE) -C $(KDIR) M=$(CURDIR)/kernel SD_UAPI=$(CURDIR)/include/uapi modules

$(USER_BUILD)/CMakeCache.txt:
	cmake -S . -B $(USER_BUILD) -DCMAKE_BUILD_TYPE=$(CMAKE_TYPE) \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX)

user: $(USER_BUILD)/CMakeCache.txt
	cmake --build $(USER_BUILD) -j$(shell nproc)

demo: all
	tests/vm/run -- tests/demo.py

check:
	scripts/check

check-unit: user
	scripts/check unit

check-host: all
	scripts/check host

check-vm: all
	scripts/check vm

# Benchmark: host part natively, guest part in the VM, pair part in two
# VMs; see Documentation/bench.rst.  bench-keep renders the last run's raw
# lines again (nothing is measured) into bench/results/DATE-PLACE.md.
.PHONY: bench bench-keep
bench: all
	bench/run

bench-keep:
	@test -d bench/out/raw || { echo "bench-keep: no run in bench/out/raw: make bench first" >&2; exit 1; }
	/usr/bin/python3 bench/report.py --out bench/out --keep bench/results bench/out/raw

vm-shell: all
	tests/vm/run -- sh -c '$(CMD)'

# The debug kernel lane (Documentation/testing.rst, "Debug kernel lane").
# The kernel is cached outside the tree (scripts/debug-kernel prints
# where) and rebuilt only when its inputs change.  The module is built
# against it from a copy of kernel/ in build/debug/kmod, so the objects of
# the normal build in kernel/ stay as they are.
DEBUG_BUILD := $(BUILD)/debug

.PHONY: debug-kernel debug-module check-debug

debug-kernel:
	nice -n 19 scripts/debug-kernel

debug-module: debug-kernel
	@kdir=$$(scripts/debug-kernel --kdir) && \
	if [ "$$(cat $(DEBUG_BUILD)/kmod/.kdir 2>/dev/null)" != "$$kdir" ]; then \
		rm -rf $(DEBUG_BUILD)/kmod && mkdir -p $(DEBUG_BUILD)/kmod && \
		echo "$$kdir" > $(DEBUG_BUILD)/kmod/.kdir; \
	fi && \
	cp -p $(KSRC) $(DEBUG_BUILD)/kmod/ && \
	echo "nice -n 19 $(MAKE) -C $$kdir M=$(DEBUG_BUILD)/kmod SD_UAPI=$(CURDIR)/include/uapi SD_VERSION_FILE=$(CURDIR)/VERSION KCFLAGS=-g modules" && \
	nice -n 19 $(MAKE) -C $$kdir M=$(DEBUG_BUILD)/kmod SD_UAPI=$(CURDIR)/include/uapi \
		SD_VERSION_FILE=$(CURDIR)/VERSION KCFLAGS=-g modules && \
	cp $(DEBUG_BUILD)/kmod/af_sd.ko $(DEBUG_BUILD)/af_sd.ko

check-debug: user debug-module
	scripts/check debug

style:
	scripts/checkpatch

install: user modules_install
	cmake --install $(USER_BUILD)
	install -D -m 644 include/uapi/linux/sd.h $(DESTDIR)$(PREFIX)/include/linux/sd.h

modules_install: module
	$(MAKE) -C $(KDIR) M=$(CURDIR)/kernel SD_UAPI=$(CURDIR)/include/uapi modules_install
	depmod -a $(KVER)

# DKMS builds the module for every installed kernel, now and on upgrades.
# Its source tree: dkms.conf with PACKAGE_VERSION stamped from VERSION,
# VERSION itself (kernel/Kbuild reads it), the module's sources and the
# uapi header.  DKMS_SRC=DIR makes it elsewhere (tests/host/test_version.py).
DKMS_SRC ?= $(DESTDIR)/usr/src/af_sd-$(SD_VERSION)

dkms-source:
	rm -rf $(DKMS_SRC)
	install -d $(DKMS_SRC)/kernel $(DKMS_SRC)/include/uapi/linux
	sed 's/"#MODULE_VERSION#"/"$(SD_VERSION)"/' dkms.conf > $(DKMS_SRC)/dkms.conf
	grep -qx 'PACKAGE_VERSION="$(SD_VERSION)"' $(DKMS_SRC)/dkms.conf
	chmod 644 $(DKMS_SRC)/dkms.conf
	install -m 644 VERSION $(DKMS_SRC)/
	install -m 644 $(KSRC) $(DKMS_SRC)/kernel/
	install -m 644 include/uapi/linux/sd.h include/uapi/linux/sd_link.h $(DKMS_SRC)/include/uapi/linux/

dkms-install: dkms-source
	dkms install af_sd/$(SD_VERSION)

dkms-remove:
	dkms remove af_sd/$(SD_VERSION) --all

clean:
	-$(MAKE) -C $(KDIR) M=$(CURDIR)/kernel clean
	rm -rf $(BUILD)
