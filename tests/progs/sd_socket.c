// SPDX-License-Identifier: GPL-2.0
/*
 * sd_socket: create and close AF_SD sockets and report, one JSON object
 * per line, what each call returned.  Used by the integration tests and by
 * `make demo`.
 *
 *   sd_socket probe      try every socket type and a few protocols
 *   sd_socket churn N    create N sockets, hold them all, close them all
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <linux/sd.h>

static const char *errname(int e)
{
	switch (e) {
	case 0: return "OK";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case EINVAL: return "EINVAL";
	case EMFILE: return "EMFILE";
	case ENOMEM: return "ENOMEM";
	default: return strerror(e);
	}
}

static void try_socket(const char *tname, int type, int proto)
{
	int fd = socket(AF_SD, type, proto);
	int err = fd < 0 ? errno : 0;
	int close_rc = 0, is_sock = 0, domain = -1;
	socklen_t len = sizeof(domain);
	struct stat st;

	if (fd >= 0) {
		is_sock = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
			domain = -errno;
		close_rc = close(fd);
	}
	printf("{\"call\": \"socket\", \"type\": \"%s\", \"protocol\": %d, "
	       "\"result\": \"%s\", \"is_socket\": %d, \"so_domain\": %d, "
	       "\"close\": %d}\n", tname, proto, errname(err), is_sock, domain,
	       close_rc);
}

static int probe(void)
{
	static const struct { const char *name; int type; } types[] = {
		{ "SOCK_STREAM", SOCK_STREAM },
		{ "SOCK_DGRAM", SOCK_DGRAM },
		{ "SOCK_SEQPACKET", SOCK_SEQPACKET },
		{ "SOCK_RAW", SOCK_RAW },
		{ "SOCK_RDM", SOCK_RDM },
		{ "SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC",
		  SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC },
	};
	static const int protos[] = { 0, IPPROTO_TCP, IPPROTO_UDP, 255 };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		try_socket(types[i].name, types[i].type, 0);
	for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++)
		try_socket("SOCK_STREAM", SOCK_STREAM, protos[i]);
	return 0;
}

static int churn(long n)
{
	int *fds = calloc((size_t)n, sizeof(*fds));
	long made = 0, closed = 0;
	int err = 0;

	struct rlimit rl;

	if (!fds)
		return 1;
	/* Room for n descriptors: the soft limit is often 1024. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (; made < n; made++) {
		fds[made] = socket(AF_SD, SOCK_STREAM, 0);
		if (fds[made] < 0) {
			err = errno;
			break;
		}
	}
	for (long i = 0; i < made; i++)
		closed += close(fds[i]) == 0;
	printf("{\"call\": \"churn\", \"asked\": %ld, \"created\": %ld, "
	       "\"closed\": %ld, \"error\": \"%s\"}\n", n, made, closed,
	       errname(err));
	free(fds);
	return made == n && closed == n ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "probe"))
		return probe();
	if (argc == 3 && !strcmp(argv[1], "churn")) {
		char *end;
		long n = strtol(argv[2], &end, 10);

		if (*end || n <= 0) {
			fprintf(stderr, "sd_socket: churn takes a positive count\n");
			return 2;
		}
		return churn(n);
	}
	fprintf(stderr, "usage: sd_socket probe | churn N\n");
	return 2;
}
