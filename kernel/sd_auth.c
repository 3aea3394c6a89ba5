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
 * Locks: sn->key_lock (spinlock) covers key, key_len and key_fpr; nothing
 * is taken under it.
 */
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

void sd_auth_net_init(struct sd_net *sn)
{
	spin_lock_init(&sn->key_lock);
}

void sd_auth_net_exit(struct sd_net *sn)
{
	memzero_explicit(sn->key, sizeof(sn->key));
	sn->key_len = 0;
}
