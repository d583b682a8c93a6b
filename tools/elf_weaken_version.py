#!/usr/bin/env python3
"""Drops one symbol's version requirement from a bundled shared library (ELF64 little-endian).

Debian's libprometheus-cpp-core.so (GCC 12) needs GLIBCXX_3.4.29 for one symbol only,
std::__throw_bad_array_new_length (GCC 11: thrown when `new T[n]` overflows), which keeps the
bundle from loading on a libstdc++ older than GCC 11 (README "Bundle": GLIBCXX_3.4.21). This
does what `patchelf --clear-symbol-version SYMBOL` does, and also marks the version's verneed
entry weak (VER_FLG_WEAK), so that glibc's loader accepts a libstdc++ without that version:
  - the symbol's .gnu.version entry becomes 1 (global: bound to any definition, lazily);
  - the Vernaux entry of the version it used gets VER_FLG_WEAK when no other symbol uses it.
On a libstdc++ >= GCC 11 nothing changes; on an older one the symbol is unresolved until called
(lazy binding), and it is only called on an overflowing array size.

Usage: elf_weaken_version.py LIB SYMBOL...   Prints what it changed; exit 1 when LIB is not a
64-bit little-endian ELF with symbol versions or a SYMBOL is not there.
"""
import struct
import sys

SHT_DYNSYM, SHT_VERNEED, SHT_VERSYM = 11, 0x6FFFFFFE, 0x6FFFFFFF
VER_FLG_WEAK = 0x2


def cstr(data, off):
    return data[off:data.index(b"\0", off)].decode()


def main(path, symbols):
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        name, stype, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        sections.append(dict(type=stype, off=off, size=size, link=link, entsize=entsize))
    by_type = {s["type"]: s for s in sections}
    if not all(t in by_type for t in (SHT_DYNSYM, SHT_VERNEED, SHT_VERSYM)):
        sys.exit(f"{path}: no dynamic symbol versions")
    dynsym, versym, verneed = by_type[SHT_DYNSYM], by_type[SHT_VERSYM], by_type[SHT_VERNEED]
    dynstr = sections[dynsym["link"]]["off"]
    vstr = sections[verneed["link"]]["off"]
    count = dynsym["size"] // dynsym["entsize"]
    names = [cstr(data, dynstr + struct.unpack_from("<I", data, dynsym["off"] + i * 24)[0])
             for i in range(count)]
    versions = [struct.unpack_from("<H", data, versym["off"] + 2 * i)[0] for i in range(count)]
    cleared = set()
    for symbol in symbols:
        if symbol not in names:
            sys.exit(f"{path}: no dynamic symbol {symbol}")
        i = names.index(symbol)
        cleared.add(versions[i] & 0x7FFF)
        versions[i] = 1
        struct.pack_into("<H", data, versym["off"] + 2 * i, 1)
    still_used = {v & 0x7FFF for v in versions}
    off = verneed["off"]
    while True:
        _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, off)
        a = off + aux
        for _ in range(cnt):
            _, flags, other, name, anext = struct.unpack_from("<IHHII", data, a)
            if other in cleared and other not in still_used:
                struct.pack_into("<H", data, a + 4, flags | VER_FLG_WEAK)
                print(f"{path}: {', '.join(symbols)}: no version; {cstr(data, vstr + name)} weak")
            if not anext:
                break
            a += anext
        if not nxt:
            break
        off += nxt
    open(path, "wb").write(data)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
