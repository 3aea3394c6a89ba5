// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The C ABI of libsd.  Every entry point is noexcept: an exception can
// never unwind into a C caller (allocation failure is caught and returned
// as -ENOMEM; anything else would terminate).
#include <sd/sd.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <new>
#include <span>

#include "ring.hpp"

struct sd_ring_producer {
	sd::Producer end;
};

struct sd_ring_consumer {
	sd::Consumer end;
};

namespace {

// Make an end of a ring; 0, -EINVAL or -ENOMEM.
template <class Handle>
int open_end(Handle **out, void *base, const sd_ring_offset *off, std::uint64_t pos) noexcept
{
	if (!out || !off)
		return -EINVAL;
	*out = nullptr;
	try {
		auto *h = new Handle{{base, *off, pos}};
		if (const int err = h->end.error()) {
			delete h;
			return err;
		}
		*out = h;
		return 0;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

bool bad_iov(const iovec *iov, int iovcnt) noexcept
{
	return iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt && !iov);
}

std::span<const iovec> iovs(const iovec *iov, int iovcnt) noexcept
{
	return {iov, static_cast<std::size_t>(iovcnt)};
}

} // namespace

extern "C" {

int sd_family(void) noexcept
{
	return AF_SD;
}

const char *sd_version(void) noexcept
{
	return SD_VERSION_STRING;
}

int sd_available(void) noexcept
{
	const int fd = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

size_t sd_ring_layout_len(size_t size) noexcept
{
	return sd::layout_len(size);
}

int sd_ring_layout(void *buf, size_t buf_len, size_t size, struct sd_ring_offset *off) noexcept
{
	return off ? sd::layout(buf, buf_len, size, *off) : -EINVAL;
}

int sd_ring_producer_open(struct sd_ring_producer **out, void *base,
			  const struct sd_ring_offset *off, uint64_t tail) noexcept
{
	return open_end(out, base, off, tail);
}

int sd_ring_consumer_open(struct sd_ring_consumer **out, void *base,
			  const struct sd_ring_offset *off, uint64_t head) noexcept
{
	return open_end(out, base, off, head);
}

void sd_ring_producer_close(struct sd_ring_producer *p) noexcept
{
	delete p;
}

void sd_ring_consumer_close(struct sd_ring_consumer *c) noexcept
{
	delete c;
}

ssize_t sd_ring_writev(struct sd_ring_producer *p, const struct iovec *iov, int iovcnt) noexcept
{
	if (!p || bad_iov(iov, iovcnt))
		return -EINVAL;
	return p->end.write(iovs(iov, iovcnt));
}

int sd_ring_write_fin(struct sd_ring_producer *p) noexcept
{
	return p ? p->end.fin() : -EINVAL;
}

ssize_t sd_ring_readv(struct sd_ring_consumer *c, const struct iovec *iov, int iovcnt,
		      int flags) noexcept
{
	if (!c || bad_iov(iov, iovcnt) || (flags & ~MSG_PEEK))
		return -EINVAL;
	return flags & MSG_PEEK ? c->end.peek(iovs(iov, iovcnt)) : c->end.read(iovs(iov, iovcnt));
}

ssize_t sd_ring_readable(struct sd_ring_consumer *c) noexcept
{
	return c ? c->end.readable() : -EINVAL;
}

int sd_ring_producer_prepare_wait(struct sd_ring_producer *p) noexcept
{
	return p ? p->end.prepare_wait() : -EINVAL;
}

int sd_ring_consumer_prepare_wait(struct sd_ring_consumer *c) noexcept
{
	return c ? c->end.prepare_wait() : -EINVAL;
}

int sd_ring_producer_take_wake(struct sd_ring_producer *p) noexcept
{
	return p && p->end.take_wake();
}

int sd_ring_consumer_take_wake(struct sd_ring_consumer *c) noexcept
{
	return c && c->end.take_wake();
}

} // extern "C"
