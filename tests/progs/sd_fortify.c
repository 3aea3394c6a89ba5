/*
 * Built with _FORTIFY_SOURCE=2, so that read, recv, recvfrom, poll and
 * ppoll become __read_chk, __recv_chk, __recvfrom_chk, __poll_chk and
 * __ppoll_chk (the lengths are not compile-time constants).  test_shim.py
 * runs it under sdrun to see that those reach the shim's hooks.
 *
 * usage: sd_fortify sd|tcp     prints "ok" and exits 0
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "sd_fortify: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void pair(int family, int fds[2])
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int lst = socket(family, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lst < 0 || bind(lst, (struct sockaddr *)&sa, sizeof(sa)) || listen(lst, 1) ||
	    getsockname(lst, (struct sockaddr *)&sa, &len))
		die("listener");
	fds[0] = socket(family, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)))
		die("connect");
	fds[1] = accept(lst, NULL, NULL);
	if (fds[1] < 0)
		die("accept");
	close(lst);
}

static void put(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		die("write");
}

int main(int argc, char **argv)
{
	int fds[2];
	char buf[64];
	/* Not constants, so the fortified inlines call the _chk variants. */
	size_t n = (size_t)(argc > 2 ? atoi(argv[2]) : 1);
	nfds_t one = (nfds_t)(argc > 3 ? atoi(argv[3]) : 1);
	struct pollfd p[1];
	struct timespec ts = {5, 0};

	if (argc < 2 || (strcmp(argv[1], "sd") && strcmp(argv[1], "tcp"))) {
		fprintf(stderr, "usage: sd_fortify sd|tcp\n");
		return 2;
	}
	pair(strcmp(argv[1], "sd") ? AF_INET : AF_SD, fds);

	put(fds[0], "abcd");
	p[0] = (struct pollfd){.fd = fds[1], .events = POLLIN};
	if (poll(p, one, 5000) != 1)
		die("poll");
	if (ppoll(p, one, &ts, NULL) != 1)
		die("ppoll");
	if (read(fds[1], buf, n) != 1 || buf[0] != 'a')
		die("read");
	if (recv(fds[1], buf, n, 0) != 1 || buf[0] != 'b')
		die("recv");
	if (recvfrom(fds[1], buf, n, 0, NULL, NULL) != 1 || buf[0] != 'c')
		die("recvfrom");
	if (read(fds[1], buf, n) != 1 || buf[0] != 'd')
		die("read");
	close(fds[0]);
	close(fds[1]);
	puts("ok");
	return 0;
}
