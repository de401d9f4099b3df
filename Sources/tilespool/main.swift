import Glibc

exit(runCLI(CommandLine.arguments))
