#include "runtime/compile/build_identity.h"

#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace kiln::runtime {
namespace {

struct Search {
  uintptr_t address = 0;  // an address inside the object we look for
  std::string build_id;
};

size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

// The NT_GNU_BUILD_ID note among the notes of one PT_NOTE segment, or "".
std::string build_id_note(const unsigned char* notes, size_t size) {
  size_t offset = 0;
  while (offset + sizeof(ElfW(Nhdr)) <= size) {
    ElfW(Nhdr) header;
    std::memcpy(&header, notes + offset, sizeof header);
    const size_t name_at = offset + sizeof header;
    const size_t desc_at = name_at + align4(header.n_namesz);
    const size_t next = desc_at + align4(header.n_descsz);
    if (next > size) break;
    if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 &&
        std::memcmp(notes + name_at, "GNU", 4) == 0) {
      std::string hex;
      for (size_t i = 0; i < header.n_descsz; ++i) hex += fmt::format("{:02x}", notes[desc_at + i]);
      return hex;
    }
    offset = next;
  }
  return "";
}

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  bool holds_address = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + segment.p_vaddr;
    if (segment.p_type == PT_LOAD && search->address >= start && search->address < start + segment.p_memsz)
      holds_address = true;
  }
  if (!holds_address) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_NOTE) continue;
    const auto* notes = reinterpret_cast<const unsigned char*>(info->dlpi_addr + segment.p_vaddr);
    search->build_id = build_id_note(notes, segment.p_memsz);
    if (!search->build_id.empty()) break;
  }
  return 1;  // found our object: stop
}

}  // namespace

const std::string& build_identity() {
  static const std::string identity = [] {
    Search search;
    search.address = reinterpret_cast<uintptr_t>(&visit);
    dl_iterate_phdr(visit, &search);
    return search.build_id;
  }();
  return identity;
}

}  // namespace kiln::runtime
