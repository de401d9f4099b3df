#!/usr/bin/env python3
"""An independent reader of a TileSpool store on disk, written from docs/store.md alone (the
format, not the Swift code): the tests' witness that every object is where the store says.

    store_reader.py list STORE         one line per object: sha256, size, where (pack name or "loose")
    store_reader.py cat STORE SHA256   the object's bytes on standard output (exit 1 when absent)
    store_reader.py extract STORE DIR SHA256...
                                       each object found written to DIR/<sha256> (one run for many)
    store_reader.py verify STORE       checks every pack, index file and loose object; exit 1 on a fault

And two commands that damage a store the way tests need (never used on a store that matters):

    store_reader.py corrupt STORE SHA256   flips the first byte of the object's body, in place
    store_reader.py drop STORE SHA256      writes its pack again without it (a valid pack and a new
                                           index file over every pack: the object is gone)
    store_reader.py backdate STORE SECONDS every pack made SECONDS older (its mtime, and its
                                           created time in a new index file over every pack)

Standard library only.
"""
import hashlib
import os
import struct
import sys

PACK_MAGIC, PACK_END, INDEX_MAGIC = b"TSPACK02", b"TSPACKND", b"TSIDX001"
PACK_MAGIC_WHOLE = b"TSPACK01"  # packs written before 2026-12-07: named by their whole bytes


def packs(store):
    root = os.path.join(store, "packs")
    for dirpath, _dirs, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".pack"):
                yield os.path.join(dirpath, f)


def records(path):
    """(sha256 hex, offset of the body, length, body) of every record of a whole pack."""
    data = open(path, "rb").read()
    return data, records_of(data, path)


def records_of(data, path="pack"):
    if data[:8] not in (PACK_MAGIC, PACK_MAGIC_WHOLE) or data[-16:-8] != PACK_END:
        raise ValueError("%s: not a whole pack" % path)
    count, reserved = struct.unpack("<II", data[-8:])
    if reserved != 0:
        raise ValueError("%s: the end's reserved field is %d, not 0" % (path, reserved))
    pos, end, out = 8, len(data) - 16, []
    while pos < end:
        digest, length = data[pos:pos + 32], struct.unpack("<I", data[pos + 32:pos + 36])[0]
        body = data[pos + 36:pos + 36 + length]
        if len(body) != length:
            raise ValueError("%s: record at %d cut short" % (path, pos))
        out.append((digest.hex(), pos + 36, length, body))
        pos += 36 + length
    if len(out) != count:
        raise ValueError("%s: %d records, the end says %d" % (path, len(out), count))
    return out


def pack_name(data, recs):
    """The name a whole pack's bytes give it: TSPACK02, the SHA-256 of the pack without its
    bodies (magic, each record's 36-byte header, the end); TSPACK01, of its whole bytes."""
    if data[:8] == PACK_MAGIC_WHOLE:
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256(data[:8])
    for _sha, off, _length, _body in recs:
        h.update(data[off - 36:off])
    h.update(data[-16:])
    return h.hexdigest()


def index_files(store):
    root = os.path.join(store, "index")
    for f in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if f.endswith(".idx"):
            yield os.path.join(root, f)


def index_entries(path):
    """(sha256 hex, pack sha256 hex, record offset, length) of an index file, checked."""
    data = open(path, "rb").read()
    if data[:8] != INDEX_MAGIC:
        raise ValueError("%s: not an index file" % path)
    if hashlib.sha256(data[:-32]).digest() != data[-32:] or data[-32:].hex() != os.path.basename(path)[:-4]:
        raise ValueError("%s: its bytes do not hash to its name" % path)
    fanout = struct.unpack("<256I", data[8:8 + 1024])
    (npacks,) = struct.unpack("<I", data[1032:1036])
    table = [data[1036 + 40 * i:1036 + 40 * i + 32].hex() for i in range(npacks)]
    base, out = 1036 + 40 * npacks, []
    for i in range(fanout[255]):
        e = data[base + 48 * i:base + 48 * (i + 1)]
        pack, offset, length = struct.unpack("<IQI", e[32:48])
        out.append((e[:32].hex(), table[pack], offset, length))
    if [e[0] for e in out] != sorted(e[0] for e in out):
        raise ValueError("%s: entries not sorted" % path)
    return out


def loose(store):
    root = os.path.join(store, "objects")
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            yield f, os.path.join(dirpath, f)


def main(argv):
    cmd, store = argv[1], argv[2]
    if cmd == "list":
        for path in packs(store):
            _data, recs = records(path)
            for sha, _off, length, _body in recs:
                print(sha, length, os.path.basename(path)[:-5])
        for sha, path in loose(store):
            print(sha, os.path.getsize(path), "loose")
        return 0
    if cmd == "cat":
        want = argv[3]
        for path in packs(store):
            for sha, _off, _length, body in records(path)[1]:
                if sha == want:
                    sys.stdout.buffer.write(body)
                    return 0
        for sha, path in loose(store):
            if sha == want:
                sys.stdout.buffer.write(open(path, "rb").read())
                return 0
        return 1
    if cmd == "extract":
        out, want = argv[3], set(argv[4:])
        for path in packs(store):
            for sha, _off, _length, body in records(path)[1]:
                if sha in want:
                    with open(os.path.join(out, sha), "wb") as f:
                        f.write(body)
                    want.discard(sha)
        for sha, path in loose(store):
            if sha in want:
                with open(os.path.join(out, sha), "wb") as f:
                    f.write(open(path, "rb").read())
        return 0
    if cmd == "verify":
        faults, bodies = [], {}
        for path in packs(store):
            try:
                data, recs = records(path)
            except ValueError as e:
                faults.append(str(e))
                continue
            if pack_name(data, recs) != os.path.basename(path)[:-5]:
                faults.append("%s: its bytes do not hash to its name" % path)
            for sha, off, length, body in recs:
                if hashlib.sha256(body).hexdigest() != sha:
                    faults.append("%s: record %s does not hash to its name" % (path, sha))
                bodies[(os.path.basename(path)[:-5], off - 36)] = (sha, length)
        present = {os.path.basename(p)[:-5] for p in packs(store)}
        for path in index_files(store):
            try:
                for sha, pack, offset, length in index_entries(path):
                    if pack not in present:
                        continue  # a pack gc removed (store.md, gc): the entry is ignored
                    if bodies.get((pack, offset)) != (sha, length):
                        faults.append("%s: %s is not at %d in pack %s" % (path, sha, offset, pack))
            except ValueError as e:
                faults.append(str(e))
        for sha, path in loose(store):
            if hashlib.sha256(open(path, "rb").read()).hexdigest() != sha:
                faults.append("%s does not hash to its name" % path)
        for f in faults:
            print(f)
        return 1 if faults else 0
    if cmd == "backdate":
        age = int(argv[3])
        for path in packs(store):
            st = os.stat(path)
            os.utime(path, (st.st_atime - age, st.st_mtime - age))
        write_index(store)
        return 0
    if cmd in ("corrupt", "drop"):
        want = argv[3]
        for path in packs(store):
            data, recs = records(path)
            hit = [r for r in recs if r[0] == want]
            if not hit:
                continue
            if cmd == "corrupt":
                with open(path, "r+b") as f:
                    f.seek(hit[0][1])
                    b = f.read(1)
                    f.seek(hit[0][1])
                    f.write(bytes([b[0] ^ 0xFF]))
                return 0
            out = bytearray(PACK_MAGIC)
            kept = [r for r in recs if r[0] != want]
            for sha, _off, length, body in kept:
                out += bytes.fromhex(sha) + struct.pack("<I", length) + body
            out += PACK_END + struct.pack("<II", len(kept), 0)
            name = pack_name(bytes(out), records_of(bytes(out)))
            os.makedirs(os.path.join(store, "packs", name[:2]), exist_ok=True)
            with open(os.path.join(store, "packs", name[:2], name + ".pack"), "wb") as f:
                f.write(out)
            os.remove(path)
            write_index(store)
            return 0
        return 1
    print(__doc__, file=sys.stderr)
    return 2


def write_index(store):
    """One index file over every pack, the others removed."""
    table, entries = [], []
    for path in packs(store):
        _data, recs = records(path)
        table.append(bytes.fromhex(os.path.basename(path)[:-5]) + struct.pack("<Q", int(os.path.getmtime(path))))
        for sha, off, length, _body in recs:
            entries.append((bytes.fromhex(sha), len(table) - 1, off - 36, length))
    entries.sort()
    fanout, acc = [], 0
    for b in range(256):
        acc += sum(1 for e in entries if e[0][0] == b)
        fanout.append(acc)
    body = bytearray(INDEX_MAGIC) + struct.pack("<256I", *fanout) + struct.pack("<I", len(table)) + b"".join(table)
    for sha, pack, off, length in entries:
        body += sha + struct.pack("<IQI", pack, off, length)
    digest = hashlib.sha256(body).digest()
    body += digest
    for old in list(index_files(store)):
        os.remove(old)
    os.makedirs(os.path.join(store, "index"), exist_ok=True)
    with open(os.path.join(store, "index", digest.hex() + ".idx"), "wb") as f:
        f.write(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
