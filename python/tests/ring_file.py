"""A phase ring file read in pure Python, from the format table in src/phase/README.md.

Test helper only: an implementation independent of the C++ reader, so the Python tests check
what the writer put on disk against the documented layout (and run in any interpreter, with
any backend, or none built).
"""

import struct

MAGIC = b"STLSRING"
HEADER = struct.Struct("<8sIIIIIIiiiIqq")  # magic .. start_realtime_ns (offsets 0..63)
WRITE_INDEX_OFFSET = 128
DROPPED_OFFSET = 136
NAME_COUNT_OFFSET = 144
NAME_TABLE_OFFSET = 4096
SLOT = struct.Struct("<qqQIHBB")  # ts_ns, arg, seq, tid, phase_id, kind, flags

KIND_BEGIN, KIND_END, KIND_STEP, KIND_MARK, KIND_COUNTER, KIND_GPU_SPAN = 1, 2, 3, 4, 5, 6
KIND_LETTER = {KIND_BEGIN: "B", KIND_END: "E", KIND_STEP: "S", KIND_MARK: "M", KIND_COUNTER: "C",
               KIND_GPU_SPAN: "G"}


def read_ring(path):
    """The whole ring as a dict: header fields, "names", "records" (tuples of kind, phase_id,
    tid, ts_ns, arg, in write order), "read" (records returned) and "lost" (slots not
    committed or overwritten)."""
    with open(path, "rb") as f:
        data = f.read()
    (magic, version, slots_offset, slot_bytes, capacity, name_capacity, name_bytes, pid, rank,
     world_size, _forked_from, start_mono, start_real) = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"{path}: not a stallscope ring (magic {magic!r})")
    if slot_bytes != SLOT.size:
        raise ValueError(f"{path}: slot size {slot_bytes}, expected {SLOT.size}")
    write_index, dropped = struct.unpack_from("<QQ", data, WRITE_INDEX_OFFSET)
    (name_count,) = struct.unpack_from("<I", data, NAME_COUNT_OFFSET)
    names = []
    for i in range(min(name_count, name_capacity)):
        raw = data[NAME_TABLE_OFFSET + i * name_bytes:NAME_TABLE_OFFSET + (i + 1) * name_bytes]
        names.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
    records, lost = [], 0
    first = max(0, write_index - capacity)
    for index in range(first, write_index):
        offset = slots_offset + (index % capacity) * slot_bytes
        ts_ns, arg, seq, tid, phase_id, kind, _flags = SLOT.unpack_from(data, offset)
        if seq != index + 1 or kind not in KIND_LETTER:
            lost += 1
            continue
        records.append((kind, phase_id, tid, ts_ns, arg))
    return {
        "path": path, "version": version, "pid": pid, "rank": rank, "world_size": world_size,
        "capacity": capacity, "start_monotonic_ns": start_mono, "start_realtime_ns": start_real,
        "names": names, "records": records, "read": len(records), "lost": lost + first,
        "dropped": dropped,
    }


def events(ring):
    """[(kind letter, name, arg)] of a ring from read_ring."""
    names = ring["names"]
    return [(KIND_LETTER[k], names[i] if i < len(names) else "?", arg)
            for k, i, _tid, _ts, arg in ring["records"]]
