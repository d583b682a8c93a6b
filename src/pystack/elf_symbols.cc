#include "pystack/elf_symbols.h"

#include <elf.h>

#include <charconv>
#include <cstring>
#include <fstream>

namespace stallscope::pystack {
namespace {

// A bound on what we read from a file we did not write: the symbol table size.
constexpr uint64_t kMaxTableBytes = 512ULL << 20;

bool ReadAt(std::ifstream& file, uint64_t offset, void* out, uint64_t size) {
  file.seekg(static_cast<std::streamoff>(offset));
  file.read(static_cast<char*>(out), static_cast<std::streamsize>(size));
  return file.good();
}

Result<std::vector<char>> ReadRange(const std::string& path, uint64_t offset, uint64_t size,
                                    uint64_t file_size) {
  if (size > kMaxTableBytes || offset > file_size || size > file_size - offset) {
    return MakeError(ErrorCode::kParse, "{}: section out of the file's bounds", path);
  }
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes(size);
  if (!ReadAt(file, offset, bytes.data(), size)) {
    return MakeError(ErrorCode::kIo, "{}: cannot read {} bytes at {}", path, size, offset);
  }
  return bytes;
}

}  // namespace

Result<ElfSymbols> ElfSymbols::Open(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return MakeError(ErrorCode::kNotFound, "{}: cannot open", path);
  ElfSymbols elf;
  elf.path_ = path;
  elf.file_size_ = static_cast<uint64_t>(file.tellg());
  Elf64_Ehdr header{};
  if (!ReadAt(file, 0, &header, sizeof(header)) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_ident[EI_DATA] != ELFDATA2LSB) {
    return MakeError(ErrorCode::kParse, "{}: not a little-endian Elf64 file", path);
  }
  // e_shnum and e_phnum are 16-bit, so every count is bounded; the entry sizes must be ours.
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_phentsize != sizeof(Elf64_Phdr)) {
    return MakeError(ErrorCode::kParse, "{}: implausible ELF header", path);
  }
  bool found_load = false;
  for (uint64_t i = 0; i < header.e_phnum && !found_load; ++i) {
    Elf64_Phdr program{};
    if (!ReadAt(file, header.e_phoff + i * sizeof(program), &program, sizeof(program))) {
      return MakeError(ErrorCode::kParse, "{}: truncated program headers", path);
    }
    if (program.p_type == PT_LOAD) {
      // The kernel maps the segment from its page-aligned start.
      elf.first_load_vaddr_ = program.p_vaddr & ~(program.p_align > 0 ? program.p_align - 1 : 0);
      elf.first_load_vaddr_ &= ~uint64_t{0xfff};
      found_load = true;
    }
  }
  if (!found_load) return MakeError(ErrorCode::kParse, "{}: no PT_LOAD segment", path);
  for (uint64_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section{};
    if (!ReadAt(file, header.e_shoff + i * sizeof(section), &section, sizeof(section))) {
      return MakeError(ErrorCode::kParse, "{}: truncated section headers", path);
    }
    elf.sections_.push_back(
        {section.sh_type, section.sh_link, section.sh_offset, section.sh_size, section.sh_entsize});
  }
  return elf;
}

std::optional<uint64_t> ElfSymbols::Find(std::string_view name) const {
  for (uint32_t wanted : {uint32_t{SHT_SYMTAB}, uint32_t{SHT_DYNSYM}}) {
    for (const Section& table : sections_) {
      if (table.type != wanted || table.link >= sections_.size() ||
          table.entsize != sizeof(Elf64_Sym)) {
        continue;
      }
      const Section& strings = sections_[table.link];
      auto symbols = ReadRange(path_, table.offset, table.size, file_size_);
      auto names = ReadRange(path_, strings.offset, strings.size, file_size_);
      if (!symbols.ok() || !names.ok()) continue;
      for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symbols->size(); at += sizeof(Elf64_Sym)) {
        Elf64_Sym symbol{};
        std::memcpy(&symbol, symbols->data() + at, sizeof(symbol));
        if (symbol.st_shndx == SHN_UNDEF || symbol.st_name >= names->size()) continue;
        const char* begin = names->data() + symbol.st_name;
        size_t max_length = names->size() - symbol.st_name;
        std::string_view symbol_name(begin, strnlen(begin, max_length));
        if (symbol_name == name) return symbol.st_value;
      }
    }
  }
  return std::nullopt;
}

std::vector<Mapping> ParseMaps(std::string_view text) {
  // "start-end perms offset dev inode   path": see proc(5).
  std::vector<Mapping> maps;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view{} : text.substr(newline + 1);
    Mapping map;
    const char* p = line.data();
    const char* end = p + line.size();
    auto [a, e1] = std::from_chars(p, end, map.start, 16);
    if (e1 != std::errc{} || a == end || *a != '-') continue;
    auto [b, e2] = std::from_chars(a + 1, end, map.end, 16);
    if (e2 != std::errc{}) continue;
    size_t perms_end = line.find(' ', static_cast<size_t>(b - p) + 1);
    if (perms_end == std::string_view::npos) continue;
    auto [c, e3] = std::from_chars(p + perms_end + 1, end, map.offset, 16);
    if (e3 != std::errc{}) continue;
    size_t slash = line.find('/', static_cast<size_t>(c - p));
    if (slash != std::string_view::npos) map.path = std::string(line.substr(slash));
    maps.push_back(std::move(map));
  }
  return maps;
}

}  // namespace stallscope::pystack
