#include "base/vocabulary.h"

#include <charconv>

#include <fmt/format.h>

namespace stallscope {
namespace {

constexpr std::string_view kRankPrefix = "rank ";

/// The one name table of the roles without data; kRank is "rank N".
constexpr std::string_view KindName(ProcessRoleKind kind) {
  switch (kind) {
    case ProcessRoleKind::kMain:
      return "main";
    case ProcessRoleKind::kRank:
      return "rank";
    case ProcessRoleKind::kDataLoaderWorker:
      return "dataloader worker";
    case ProcessRoleKind::kLauncher:
      return "launcher";
    case ProcessRoleKind::kChild:
      return "child";
  }
  return "child";
}

constexpr ProcessRoleKind kKinds[] = {ProcessRoleKind::kMain, ProcessRoleKind::kDataLoaderWorker,
                                      ProcessRoleKind::kLauncher, ProcessRoleKind::kChild};

}  // namespace

std::string ToString(ProcessRole role) {
  if (role.kind == ProcessRoleKind::kRank) return fmt::format("{}{}", kRankPrefix, role.rank);
  return std::string(KindName(role.kind));
}

std::optional<ProcessRole> ProcessRoleFromString(std::string_view text) {
  if (text.starts_with(kRankPrefix)) {
    std::string_view digits = text.substr(kRankPrefix.size());
    int32_t rank = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (ec != std::errc() || end != digits.data() + digits.size() || rank < 0) return std::nullopt;
    return ProcessRole{ProcessRoleKind::kRank, rank};
  }
  for (ProcessRoleKind kind : kKinds) {
    if (text == KindName(kind)) return ProcessRole{kind, 0};
  }
  return std::nullopt;
}

}  // namespace stallscope
