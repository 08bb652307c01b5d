// `kiln cache info|clear`: the on-disk kernel cache.
#include <fmt/format.h>
#include <iostream>

#include "compiler/cli.h"
#include "runtime/compile/kernel_cache.h"

namespace kiln::cli {

Command add_cache_command(CLI::App& app) {
  auto action = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "cache", "Show or clear the kernel cache ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln or ~/.cache/kiln)");
  cmd->add_option("ACTION", *action, "info: where it is and what it holds; clear: remove every entry")
      ->required()
      ->check(CLI::IsMember({"info", "clear"}));
  return {cmd, [action]() {
            const runtime::KernelCache cache(runtime::KernelCache::default_directory());
            if (*action == "clear") {
              const int64_t removed = cache.clear();
              std::cout << fmt::format("removed {} entries from {}\n", removed, cache.directory());
              return kExitOk;
            }
            const runtime::CacheInfo info = cache.info();
            const int64_t limit = runtime::KernelCache::max_bytes_from_environment();
            std::cout << fmt::format("directory: {}\nentries:   {}\nsize:      {:.1f} KiB\nlimit:     {}\n",
                                     info.directory, info.entries, info.bytes / 1024.0,
                                     limit > 0 ? fmt::format("{:.1f} MiB (KILN_CACHE_MAX_SIZE)", limit / 1048576.0)
                                               : std::string("none (KILN_CACHE_MAX_SIZE=0)"));
            return kExitOk;
          }};
}

}  // namespace kiln::cli
