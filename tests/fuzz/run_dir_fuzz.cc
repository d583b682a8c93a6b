// Run directory readers: run.json (src/rundir/run_dir.h ReadRunMeta) and the phase data
// (src/phase/event_log.h ReadEventLog: events.bin, events.names.jsonl, the rings in phases/ and
// their meta files). The input is up to five sections separated by kSeparator, written as:
//   run.json | events.bin | events.names.jsonl | phases/7.meta.jsonl | phases/7.ring
// A missing section leaves its file out (events.bin missing: the rings are read directly). The
// ring section is packed, so that small inputs reach the records: its first kHeaderPart bytes are
// the ring header (offset 0), the next kNamesPart bytes the first name entries (offset 4096),
// the rest the slots (offset kSlotsOffset); the file ends where the section does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "phase/event_log.h"
#include "phase/ring_format.h"
#include "rundir/run_dir.h"

namespace {

namespace fs = std::filesystem;
namespace phase = stallscope::phase;
using stallscope::fuzz::ReadPrefix;

constexpr std::string_view kSeparator = "\n@@\n";
constexpr const char* kFiles[] = {"run.json", "events.bin", "events.names.jsonl",
                                  "phases/7.meta.jsonl", "phases/7.ring"};
constexpr size_t kHeaderPart = sizeof(phase::RingHeader);
constexpr size_t kNamesPart = 4 * phase::kNameBytes;

std::string UnpackRing(std::string_view packed) {
  std::string file(packed.substr(0, kHeaderPart));
  packed.remove_prefix(file.size());
  if (packed.empty()) return file;
  file.resize(phase::kHeaderBlockBytes, '\0');
  file.append(packed.substr(0, kNamesPart));
  packed.remove_prefix(std::min(packed.size(), kNamesPart));
  if (packed.empty()) return file;
  file.resize(phase::kSlotsOffset, '\0');
  file.append(packed);
  return file;
}

// A small valid ring: pid 7, names "load" and "step", a begin/end pair and a step.
std::string PackedRing() {
  std::vector<uint64_t> words((kHeaderPart + kNamesPart + 3 * phase::kSlotBytes) / 8 + 1, 0);
  char* bytes = reinterpret_cast<char*>(words.data());
  auto* header = reinterpret_cast<phase::RingHeader*>(bytes);
  std::memcpy(header->magic, phase::kRingMagic, 8);
  header->version = phase::kRingVersion;
  header->slots_offset = phase::kSlotsOffset;
  header->slot_bytes = phase::kSlotBytes;
  header->capacity = phase::kMinCapacity;
  header->name_capacity = phase::kNameCapacity;
  header->name_bytes = phase::kNameBytes;
  header->pid = 7;
  header->world_size = 1;
  header->start_monotonic_ns = 1'000'000;
  header->write_index.store(3);
  header->name_count.store(3);
  std::strcpy(bytes + kHeaderPart + phase::kNameBytes, "load");
  std::strcpy(bytes + kHeaderPart + 2 * phase::kNameBytes, "step");
  auto* slots = reinterpret_cast<phase::RingSlot*>(bytes + kHeaderPart + kNamesPart);
  const phase::RecordKind kinds[] = {phase::RecordKind::kBegin, phase::RecordKind::kEnd,
                                     phase::RecordKind::kStep};
  for (uint64_t i = 0; i < 3; ++i) {
    slots[i].ts_ns.store(static_cast<int64_t>(2'000'000 + i * 1000));
    slots[i].arg.store(1);
    slots[i].meta.store(phase::PackMeta(7, i < 2 ? 1 : 2, kinds[i], 0));
    slots[i].seq.store(i + 1);
  }
  return std::string(bytes, kHeaderPart + kNamesPart + 3 * phase::kSlotBytes);
}

// Each tests/data/runs/<run> packed as above, with the synthetic ring and without it.
void WriteSeeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/runs", ec)) {
    std::string meta;
    for (const auto& m : fs::directory_iterator(e.path() / "phases", ec))
      meta = ReadPrefix(m.path(), 2048);
    std::string seed;
    for (const char* file : {"run.json", "events.bin", "events.names.jsonl"}) {
      seed += ReadPrefix(e.path() / file, 4096);
      seed += kSeparator;
    }
    seed += meta;
    std::string name = e.path().filename().string();
    stallscope::fuzz::WriteSeed(dir, name, seed);
    stallscope::fuzz::WriteSeed(dir, name + "_ring", seed + std::string(kSeparator) + PackedRing());
  }
  // Rings only (no events.bin), as after a monitor that died before its first flush.
  std::string rings_only =
      ReadPrefix(STALLSCOPE_SOURCE_DIR "/tests/data/runs/data_cpu/run.json", 4096);
  rings_only += std::string(kSeparator) + std::string(kSeparator) + std::string(kSeparator);
  stallscope::fuzz::WriteSeed(dir, "rings_only", rings_only);  // events.bin empty: no events
  stallscope::fuzz::WriteSeed(dir, "rings_only_ring",
                              rings_only + std::string(kSeparator) + PackedRing());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string run_dir = stallscope::fuzz::ScratchDir() + "/run";
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  fs::create_directories(run_dir + "/phases", ec);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto sections = stallscope::fuzz::Sections(input, kSeparator, std::size(kFiles));
  for (size_t i = 0; i < sections.size(); ++i) {
    const bool ring = i + 1 == std::size(kFiles);  // packed: header, names, slots
    stallscope::fuzz::WriteFile(run_dir + "/" + kFiles[i],
                                ring ? UnpackRing(sections[i]) : std::string(sections[i]));
  }
  (void)stallscope::rundir::ReadRunMeta({run_dir});
  (void)stallscope::phase::ReadEventLog(run_dir);
  return 0;
}
