"""narinfo parsing/printing, Nix's fingerprint, and ed25519 signatures in Nix's key forms."""

from __future__ import annotations

import pytest

from cudapkgs.store.caches.narinfo import CacheInfo, NarInfo, NarInfoError
from cudapkgs.store.caches.signing import KeyError_, PublicKey, SecretKey, generate

# A real narinfo as cache.nixos.org serves it (https://cache.nixos.org/syd87l2rxw8cbsxmxl853h0r6pdwhwjr.narinfo),
# signed by cache.nixos.org's published key (the default trusted-public-keys of Nix, NixOS/nix
# src/libstore/globals.hh / nix.conf documentation).
CURL = """\
StorePath: /nix/store/syd87l2rxw8cbsxmxl853h0r6pdwhwjr-curl-7.82.0-bin
URL: nar/05ra3y72i3qjri7xskf9qj8kb29r6naqy1sqpbs3azi3xcigmj56.nar.xz
Compression: xz
FileHash: sha256:05ra3y72i3qjri7xskf9qj8kb29r6naqy1sqpbs3azi3xcigmj56
FileSize: 68852
NarHash: sha256:1b4sb93wp679q4zx9k1ignby1yna3z7c4c2ri3wphylbc2dwsys0
NarSize: 196040
References: 0jqd0rlxzra1rs38rdxl43yh6rxchgc6-curl-7.82.0 6w8g7njm4mck5dmjxws0z1xnrxvl81xa-glibc-2.34-115 j5jxw3iy7bbz4a57fh9g2xm2gxmyal8h-zlib-1.2.12 yxvjs9drzsphm9pcf42a4byzj1kb9m7k-openssl-1.1.1n
Deriver: 5rwxzi7pal3qhpsyfc16gzkh939q1np6-curl-7.82.0.drv
Sig: cache.nixos.org-1:TsTTb3WGTZKphvYdBHXwo6weVILmTytUjLB+vcX89fOjjRicCHmKA4RCPMVLkj6TMJ4GMX3HPVWRdD1hkeKZBQ==
"""
# hello-2.10, quoted in the Nix community's write-up of binary cache trust (a narinfo whose references include itself).
HELLO = """\
StorePath: /nix/store/w9yy7v61ipb5rx6i35zq1mvc2iqfmps1-hello-2.10
URL: nar/15zk4zszw9lgkdkkwy7w11m5vag11n5dhv2i6hj308qpxczvdddx.nar.xz
Compression: xz
FileHash: sha256:15zk4zszw9lgkdkkwy7w11m5vag11n5dhv2i6hj308qpxczvdddx
FileSize: 41232
NarHash: sha256:1mi14cqk363wv368ffiiy01knardmnlyphi6h9xv6dkjz44hk30i
NarSize: 205968
References: 9df65igwjmf2wbw0gbrrgair6piqjgmi-glibc-2.31 w9yy7v61ipb5rx6i35zq1mvc2iqfmps1-hello-2.10
Sig: cache.nixos.org-1:uP5KU8MCmyRnKGlN5oEv6xWJBI5EO/Pf5aFztZuLSz8BpCcZ1fdBnJkVXhBAlxkdm/CemsgQskhwvyd2yghTAg==
"""
NIXOS_KEY = "cache.nixos.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY="


def test_fingerprint_is_nixs():
    info = NarInfo.parse(CURL, "curl")
    assert info.fingerprint() == (
        b"1;/nix/store/syd87l2rxw8cbsxmxl853h0r6pdwhwjr-curl-7.82.0-bin;"
        b"sha256:1b4sb93wp679q4zx9k1ignby1yna3z7c4c2ri3wphylbc2dwsys0;196040;"
        b"/nix/store/0jqd0rlxzra1rs38rdxl43yh6rxchgc6-curl-7.82.0,/nix/store/6w8g7njm4mck5dmjxws0z1xnrxvl81xa-glibc-2.34-115,"
        b"/nix/store/j5jxw3iy7bbz4a57fh9g2xm2gxmyal8h-zlib-1.2.12,/nix/store/yxvjs9drzsphm9pcf42a4byzj1kb9m7k-openssl-1.1.1n"
    )


@pytest.mark.parametrize("text", [CURL, HELLO])
def test_real_cache_nixos_org_signatures_verify(text):
    info = NarInfo.parse(text, "real")
    key = PublicKey.parse(NIXOS_KEY)
    assert key.verify(info.sigs[0], info.fingerprint())
    assert info.to_text() == text  # printing round-trips Nix's field order
    tampered = NarInfo.parse(text.replace("NarSize: ", "NarSize: 1"), "t")
    assert not key.verify(tampered.sigs[0], tampered.fingerprint())


def test_own_keys_round_trip_and_sign_like_nix(tmp_path):
    secret = generate("lab-cache-1")
    again = SecretKey.parse(str(secret))
    assert again == secret and str(secret.public).startswith("lab-cache-1:")
    info = NarInfo.parse(CURL, "curl").with_sigs(())
    sig = secret.sign(info.fingerprint())
    assert sig.startswith("lab-cache-1:")
    assert PublicKey.parse(str(secret.public)).verify(sig, info.fingerprint())
    assert not PublicKey.parse(NIXOS_KEY).verify(sig, info.fingerprint())  # another key's name
    assert not generate("lab-cache-1").public.verify(sig, info.fingerprint())  # same name, other key


@pytest.mark.parametrize("text, words", [
    ("lab:abc", "not base64"),
    ("nocolon", "expected <name>:<base64>"),
    ("lab:" + "QUFB" * 11, "bytes after decoding"),
])
def test_bad_keys_are_one_line_errors(text, words):
    with pytest.raises(KeyError_, match=words):
        SecretKey.parse(text, "key.sec")


def test_a_secret_key_whose_halves_disagree_is_refused():
    a, b = generate("x"), generate("x")
    import base64

    mixed = "x:" + base64.b64encode(a.seed + b.public_raw).decode()
    with pytest.raises(KeyError_, match="does not belong"):
        SecretKey.parse(mixed)


@pytest.mark.parametrize("change, words", [
    (lambda t: t.replace("NarHash: sha256:1b4sb93wp679q4zx9k1ignby1yna3z7c4c2ri3wphylbc2dwsys0\n", ""), "missing field"),
    (lambda t: t.replace("StorePath: /nix/store/syd87l2rxw8cbsxmxl853h0r6pdwhwjr-curl-7.82.0-bin\n", ""), "missing field"),
    (lambda t: t.replace("FileSize: 68852", "FileSize: -1"), "not a number"),
    (lambda t: t.replace("NarSize: 196040", "NarSize: many"), "not a number"),
    (lambda t: t.replace("NarSize: 196040", f"NarSize: {2**64}"), "larger than 2\\^64 - 1 bytes"),
    (lambda t: t.replace("FileSize: 68852", "FileSize: 99999999999999999999"), "FileSize 99999999999999999999 is larger than"),
    (lambda t: t.replace("URL: nar/", "URL: ../../"), "not a relative path"),
    (lambda t: t.replace("Compression: xz", "Compression: rar"), "not supported"),
    (lambda t: t + "Colour blue\n", "not 'Field: value'"),
    (lambda t: t.replace("StorePath: /nix/store/syd87", "StorePath: syd87"), "not a store path"),
])
def test_malformed_narinfo_is_refused_naming_where(change, words):
    with pytest.raises(NarInfoError, match=words) as error:
        NarInfo.parse(change(CURL), "https://cache.example/x.narinfo")
    assert "https://cache.example/x.narinfo" in str(error.value)


def test_cache_info():
    info = CacheInfo.parse(b"StoreDir: /nix/store\nWantMassQuery: 1\nPriority: 40\n", "c")
    assert info.store_dir == "/nix/store" and info.priority == 40
    assert CacheInfo.parse(info.to_text().encode(), "c") == info
    with pytest.raises(NarInfoError, match="no StoreDir"):
        CacheInfo.parse(b"Priority: 1\n", "c")


def test_the_largest_uint64_size_is_still_read():
    top = 2**64 - 1  # what Nix's uint64_t holds: refused one past it, read at it
    info = NarInfo.parse(CURL.replace("NarSize: 196040", f"NarSize: {top}").replace("FileSize: 68852", f"FileSize: {top}"), "x")
    assert info.nar_size == info.file_size == top


def test_narinfo_as_nix_serve_writes_it_parses():
    """nix-serve writes no FileHash/FileSize and old caches no Compression (Nix then assumes bzip2)."""
    text = "\n".join(l for l in CURL.splitlines() if not l.startswith(("FileHash", "FileSize", "Compression"))) + "\n"
    info = NarInfo.parse(text.replace("References: ", "References:").replace(
        "References:0jqd", "References: 0jqd"), "nix-serve")
    assert info.compression == "bzip2" and info.file_hash is None and info.file_size is None
    assert info.download_size == info.nar_size
    assert PublicKey.parse(NIXOS_KEY).verify(info.sigs[0], info.fingerprint())  # the signature does not cover them
    empty = NarInfo.parse("StorePath: /s/" + "a" * 32 + "-x\nURL: nar/x.nar\nCompression: none\nNarHash: sha256:"
                          + "0" * 52 + "\nNarSize: 8\nReferences:\n", "empty refs")
    assert empty.references == ()
