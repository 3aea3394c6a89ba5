// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: the fabric key, which the monitors of the hosts that meet over
 * the rendezvous share (Documentation/rdma.rst, "Authentication").
 *
 * Each network namespace holds at most one key, set and cleared by its
 * admin over netlink (SD_CMD_KEY_SET, SD_CMD_KEY_DEL); nobody reads it
 * back: SD_CMD_KEY_GET gives a fingerprint, the first bytes of its
 * SHA-256.  The rendezvous copies it out under key_lock for the moment it
 * takes to key a session, and wipes its copy.
 *
 * Each rendezvous is a session: the two monitors exchange HELLOs with a
 * random nonce each, and both derive the session key
 *
 *	HMAC-SHA256(fabric key, "AF_SD rendezvous v3" || nonce_c || nonce_s)
 *
 * (nonce_c the connecting side's, nonce_s the answering side's).  Every
 * message after the HELLOs ends in a tag
 *
 *	HMAC-SHA256(session key, direction || sequence || message)
 *
 * direction 'C' from the connecting side, 'S' from the answering side,
 * sequence a big-endian u64 counting that direction's messages from 0.
 * A message forged without the key, replayed (from this session or
 * another), reflected back, reordered or changed on the way fails
 * sd_rdv_check(); its exchange or link ends there.
 *
 * Locks: sn->key_lock (spinlock) covers key, key_len and key_fpr; nothing
 * is taken under it.  A session's tfm is read-only once keyed; tx_seq
 * belongs to whoever sends (a link's send_lock), rx_seq to whoever reads
 * (a link's rx_work).
 */
#include <crypto/algapi.h>
#include <crypto/hash.h>
#include <crypto/sha2.h>
#include <linux/string.h>

#include "af_sd.h"

/* SHA-256 of @key, shortened to the fingerprint.  May sleep. */
static int sd_key_fingerprint(const u8 *key, unsigned int len,
			      u8 fpr[SD_KEY_FPR_LEN])
{
	u8 digest[SHA256_DIGEST_SIZE];
	struct crypto_shash *tfm;
	int err;

	tfm = crypto_alloc_shash("sha256", 0, 0);
	if (IS_ERR(tfm))
		return PTR_ERR(tfm);
	err = crypto_shash_tfm_digest(tfm, key, len, digest);
	crypto_free_shash(tfm);
	if (!err)
		memcpy(fpr, digest, SD_KEY_FPR_LEN);
	memzero_explicit(digest, sizeof(digest));
	return err;
}

/**
 * sd_key_set - set the namespace's fabric key
 * @sn: the namespace's state
 * @key: the key
 * @len: its length, SD_KEY_MIN_LEN to SD_KEY_MAX_LEN (the netlink policy
 *	checked it)
 *
 * Replaces any key.  Exchanges already keyed keep their session keys.
 */
int sd_key_set(struct sd_net *sn, const u8 *key, unsigned int len)
{
	u8 fpr[SD_KEY_FPR_LEN];
	int err;

	if (len < SD_KEY_MIN_LEN || len > SD_KEY_MAX_LEN)
		return -EINVAL;
	err = sd_key_fingerprint(key, len, fpr);
	if (err)
		return err;
	spin_lock(&sn->key_lock);
	memzero_explicit(sn->key, sizeof(sn->key));
	memcpy(sn->key, key, len);
	sn->key_len = len;
	memcpy(sn->key_fpr, fpr, sizeof(fpr));
	spin_unlock(&sn->key_lock);
	sd_remote_key_changed(sn);
	return 0;
}

/* Forget the key: -ENOENT when there was none. */
int sd_key_del(struct sd_net *sn)
{
	int err = 0;

	spin_lock(&sn->key_lock);
	if (!sn->key_len)
		err = -ENOENT;
	memzero_explicit(sn->key, sizeof(sn->key));
	sn->key_len = 0;
	memset(sn->key_fpr, 0, sizeof(sn->key_fpr));
	spin_unlock(&sn->key_lock);
	if (!err)
		sd_remote_key_changed(sn);
	return err;
}

/* The key's fingerprint in @fpr: false when no key is set. */
bool sd_key_get_fpr(struct sd_net *sn, u8 fpr[SD_KEY_FPR_LEN])
{
	bool set;

	spin_lock(&sn->key_lock);
	set = sn->key_len;
	memcpy(fpr, sn->key_fpr, SD_KEY_FPR_LEN);
	spin_unlock(&sn->key_lock);
	return set;
}

/* Whether a key is set (it may change the moment after). */
bool sd_key_present(struct sd_net *sn)
{
	return READ_ONCE(sn->key_len);
}

/*
 * Copy the key out into @buf (SD_KEY_MAX_LEN bytes): its length, 0 when
 * none is set.  The caller wipes @buf.
 */
unsigned int sd_key_copy(struct sd_net *sn, u8 *buf)
{
	unsigned int len;

	spin_lock(&sn->key_lock);
	len = sn->key_len;
	memcpy(buf, sn->key, len);
	spin_unlock(&sn->key_lock);
	return len;
}

#define SD_RDV_LABEL	"AF_SD rendezvous v3"
#define SD_RDV_DIR_C	'C'	/* from the connecting side */
#define SD_RDV_DIR_S	'S'	/* from the answering side */

/**
 * sd_rdv_auth_init - key a session with the fabric key and both nonces
 * @a: the session, set up here
 * @sn: the namespace, whose key is used
 * @client: this side connected (else it answers)
 * @nonce_c: the connecting side's nonce, SD_RDV_NONCE_LEN bytes
 * @nonce_s: the answering side's
 *
 * Returns 0, -ENOKEY when the namespace has no key, or another -errno
 * (the crypto API's).  May sleep.
 */
int sd_rdv_auth_init(struct sd_rdv_auth *a, struct sd_net *sn, bool client,
		     const u8 *nonce_c, const u8 *nonce_s)
{
	u8 key[SD_KEY_MAX_LEN], session[SHA256_DIGEST_SIZE];
	struct crypto_shash *tfm;
	unsigned int len;
	int err;

	memset(a, 0, sizeof(*a));
	len = sd_key_copy(sn, key);
	if (!len) {
		err = -ENOKEY;
		goto out;
	}
	tfm = crypto_alloc_shash("hmac(sha256)", 0, 0);
	if (IS_ERR(tfm)) {
		err = PTR_ERR(tfm);
		goto out;
	}
	err = crypto_shash_setkey(tfm, key, len);
	if (err)
		goto out_free;
	{
		SHASH_DESC_ON_STACK(desc, tfm);

		desc->tfm = tfm;
		err = crypto_shash_init(desc);
		if (!err)
			err = crypto_shash_update(desc, SD_RDV_LABEL,
						  sizeof(SD_RDV_LABEL) - 1);
		if (!err)
			err = crypto_shash_update(desc, nonce_c,
						  SD_RDV_NONCE_LEN);
		if (!err)
			err = crypto_shash_update(desc, nonce_s,
						  SD_RDV_NONCE_LEN);
		if (!err)
			err = crypto_shash_final(desc, session);
		shash_desc_zero(desc);
	}
	if (err)
		goto out_free;
	err = crypto_shash_setkey(tfm, session, sizeof(session));
	if (err)
		goto out_free;
	a->tfm = tfm;
	a->client = client;
	goto out;

out_free:
	crypto_free_shash(tfm);
out:
	memzero_explicit(key, sizeof(key));
	memzero_explicit(session, sizeof(session));
	return err;
}

/* Free a session's key; a session never keyed, or freed, is fine. */
void sd_rdv_auth_free(struct sd_rdv_auth *a)
{
	if (a->tfm)
		crypto_free_shash(a->tfm);
	a->tfm = NULL;
}

/* Hand a session over to @to (a link takes its exchange's). */
void sd_rdv_auth_move(struct sd_rdv_auth *to, struct sd_rdv_auth *from)
{
	*to = *from;
	from->tfm = NULL;
}

/* The tag of the @len bytes at @msg, sent in @dir as number @seq. */
static int sd_rdv_mac(struct crypto_shash *tfm, u8 dir, u64 seq,
		      const void *msg, size_t len, u8 *tag)
{
	SHASH_DESC_ON_STACK(desc, tfm);
	__be64 nseq = cpu_to_be64(seq);
	int err;

	desc->tfm = tfm;
	err = crypto_shash_init(desc);
	if (!err)
		err = crypto_shash_update(desc, &dir, 1);
	if (!err)
		err = crypto_shash_update(desc, (const u8 *)&nseq,
					  sizeof(nseq));
	if (!err)
		err = crypto_shash_finup(desc, msg, len, tag);
	shash_desc_zero(desc);
	return err;
}

/**
 * sd_rdv_seal - tag a message that is about to be sent
 * @a: the session
 * @msg: the whole message; its last SD_RDV_TAG_LEN bytes take the tag
 * @len: its length, with the tag
 *
 * Takes the next number of this side's direction.  The caller serialises
 * the sends of a session.
 */
int sd_rdv_seal(struct sd_rdv_auth *a, void *msg, size_t len)
{
	if (WARN_ON_ONCE(!a->tfm || len < SD_RDV_TAG_LEN))
		return -EINVAL;
	return sd_rdv_mac(a->tfm, a->client ? SD_RDV_DIR_C : SD_RDV_DIR_S,
			  a->tx_seq++, msg, len - SD_RDV_TAG_LEN,
			  (u8 *)msg + len - SD_RDV_TAG_LEN);
}

/**
 * sd_rdv_check - whether a message came from the other side, as it is
 * @a: the session
 * @msg: the whole message as received, ending in its tag
 * @len: its length, with the tag
 *
 * The tag must be the other side's for the next number of its direction
 * (compared in constant time).  A message that fails is not to be acted
 * on at all: its exchange or link ends.  Consumes the number only when it
 * passes.  The caller serialises the receives of a session.
 */
bool sd_rdv_check(struct sd_rdv_auth *a, const void *msg, size_t len)
{
	u8 tag[SD_RDV_TAG_LEN];
	bool ok;

	if (!a->tfm || len < SD_RDV_TAG_LEN)
		return false;
	ok = !sd_rdv_mac(a->tfm, a->client ? SD_RDV_DIR_S : SD_RDV_DIR_C,
			 a->rx_seq, msg, len - SD_RDV_TAG_LEN, tag) &&
	     !crypto_memneq(tag, (const u8 *)msg + len - SD_RDV_TAG_LEN,
			    SD_RDV_TAG_LEN);
	memzero_explicit(tag, sizeof(tag));
	if (ok)
		a->rx_seq++;
	return ok;
}

void sd_auth_net_init(struct sd_net *sn)
{
	spin_lock_init(&sn->key_lock);
}

void sd_auth_net_exit(struct sd_net *sn)
{
	memzero_explicit(sn->key, sizeof(sn->key));
	sn->key_len = 0;
}
