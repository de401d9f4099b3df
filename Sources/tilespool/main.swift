import CLinux
import Glibc

// Two malloc arenas, not glibc's up to eight per core: tile bodies are allocated on the HTTP
// thread and freed on the store's, and with an arena per thread each kept what it had freed. On the
// bench's million distinct bodies the daemon's peak RSS was 150 MiB with the default and 59 MiB
// with two (docs/benchmarks.md). MALLOC_ARENA_MAX in the environment still decides when given.
if getenv("MALLOC_ARENA_MAX") == nil { _ = tilespool_limit_malloc_arenas(2) }

exit(runCLI(CommandLine.arguments))
