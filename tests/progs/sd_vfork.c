// SPDX-License-Identifier: GPL-2.0
/*
 * sd_vfork: run a program in a child of vfork, wait for it, read from a
 * socket, then become another program.  Used by pair_remote.py to check
 * that a vfork child's exec leaves its parent's RDMA connections to the
 * parent's bridge (Documentation/rdma.rst, "Exec").
 *
 *   sd_vfork CHILD FD N -- NEXT [ARG...]
 *
 * CHILD runs with no arguments (execv, through libsd's hook when under
 * sdrun); it must exit 0.  Then this process reads N bytes from
 * descriptor FD (they must come), and execs NEXT with its arguments.
 * Exit status 2 for bad usage, 1 for a failure of its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

/* n bytes from fd, or -1 with errno (0: the end came first). */
static int recv_exact(int fd, unsigned long n)
{
	static char buf[65536];
	ssize_t r;

	while (n) {
		r = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			return -1;
		}
		n -= (unsigned long)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char *child[2] = { NULL, NULL };
	unsigned long n;
	char *end;
	int status, fd;
	pid_t pid;

	if (argc < 6 || strcmp(argv[4], "--")) {
		fprintf(stderr, "usage: sd_vfork CHILD FD N -- NEXT [ARG...]\n");
		return 2;
	}
	child[0] = argv[1];
	fd = (int)strtol(argv[2], &end, 10);
	if (*end || fd < 0)
		return 2;
	n = strtoul(argv[3], &end, 10);
	if (*end)
		return 2;
	pid = vfork();
	if (pid < 0) {
		perror("sd_vfork: vfork");
		return 1;
	}
	if (pid == 0) {
		execv(child[0], child);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "sd_vfork: %s failed (status %#x)\n", child[0], status);
		return 1;
	}
	if (recv_exact(fd, n)) {
		fprintf(stderr, "sd_vfork: recv: %s\n", errno ? strerror(errno) : "end of stream");
		return 1;
	}
	execv(argv[5], argv + 5);
	fprintf(stderr, "sd_vfork: %s: %s\n", argv[5], strerror(errno));
	return 1;
}
