// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The owner's half of the token protocol for one side of a ring (the
// "Tokens" comment of <linux/sd.h>): who may drive the side, and the busy
// count that tells the kernel an owner is inside a call.  Header-only, so
// that the shim and the host unit tests (tests/unit/test_token.cpp, which
// play the kernel's half) use the same code.
//
// Threads of one process share a TokenSide under a lock of their own;
// processes each have theirs, over the same two words.
#pragma once

#include <cstdint>

namespace sd {

class TokenSide {
public:
	TokenSide() noexcept = default;
	TokenSide(std::uint32_t *token_word, std::uint32_t *busy) noexcept
		: word_(token_word), busy_(busy)
	{
	}

	// Start a call as the owner.  acquire() asks the kernel for the side
	// and returns the new token, 0 if it refused.  true: the side is ours
	// until end(); false: it is not (use the system call), and busy is
	// as it was.
	//
	// busy is a count: adding our 1 before looking at the token, and
	// taking back only our 1 when the token is not ours, never clears
	// another owner's mark.  The locked add is also the full barrier
	// between it and the token load, which pairs with the kernel's
	// token store, barrier, busy load.
	//
	// The common case, the side still ours, is inline: a locked add, a
	// load and a compare.  Anything else goes out of line.
	template <typename Acquire> bool begin(Acquire &&acquire) noexcept
	{
		if (token_) [[likely]]
			return mark() || begin_slow(acquire, 1);
		return begin_slow(acquire, 2);
	}

	// End a call begun with begin() (release: the call's stores, the
	// position among them, come before the kernel can see busy drop).
	void end() noexcept { __atomic_fetch_sub(busy_, 1, __ATOMIC_RELEASE); }

	// The kernel took the side back (a call finished in the kernel, a
	// fork's child, which owns nothing).
	void lost() noexcept { token_ = 0; }

	// Whether this process holds the token now.  A hint: the kernel may
	// take it back the moment after.
	bool ours() const noexcept
	{
		return token_ && __atomic_load_n(word_, __ATOMIC_ACQUIRE) == token_;
	}

	std::uint32_t token() const noexcept { return token_; }

private:
	// Add our 1 to busy and check that the token is still ours; if not,
	// take the 1 back and forget the token.
	bool mark() noexcept
	{
		__atomic_fetch_add(busy_, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(word_, __ATOMIC_RELAXED) == token_)
			return true;
		__atomic_fetch_sub(busy_, 1, __ATOMIC_RELEASE);
		token_ = 0;		// taken back: ask again
		return false;
	}

	// Ask the kernel, at most tries times: a token taken back between
	// its answer and our mark is asked for once more, one found taken
	// back at the start of a call once.
	template <typename Acquire>
	[[gnu::noinline]] bool begin_slow(Acquire &acquire, int tries) noexcept
	{
		while (tries--) {
			if (!(token_ = acquire()))
				return false;
			if (mark())
				return true;
		}
		return false;
	}

	std::uint32_t *word_ = nullptr;
	std::uint32_t *busy_ = nullptr;
	std::uint32_t token_ = 0;	// ours; 0: not ours
};

} // namespace sd
