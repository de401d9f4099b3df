// swift-tools-version:6.0
// TileSpool: a watch-folder daemon that downloads map regions into a content-addressed store.
//
// Layers (each target depends only on those listed before it):
//   CCurl, CCrypto, CLinux,
//   CSQLite, CZlib, CDeflate C modules from Debian's -dev packages (system libraries)
//   TileSpoolCore            pure values: tile math, requests, style planning, the region state machine
//   TileSpoolIO              edges: HTTP (libcurl), SHA-256 (libcrypto), the store, the spool, inotify
//   TileSpoolExport          packs out: MapLibre offline database, MBTiles, PMTiles, static site (SQLite, zlib, libdeflate)
//   TileSpoolDaemon          the scheduler that wires plans, downloads, store and status together
//   tilespool                the command-line interface
import PackageDescription

let package = Package(
    name: "TileSpool",
    products: [
        .executable(name: "tilespool", targets: ["tilespool"]),
    ],
    targets: [
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CCrypto", path: "Sources/CCrypto", pkgConfig: "libcrypto",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLinux", path: "Sources/CLinux"),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", pkgConfig: "zlib",
                       providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CDeflate", path: "Sources/CDeflate", pkgConfig: "libdeflate",
                       providers: [.apt(["libdeflate-dev"])]),
        .target(name: "TileSpoolCore"),
        .target(name: "TileSpoolIO", dependencies: ["TileSpoolCore", "CCurl", "CCrypto", "CLinux"]),
        .target(name: "TileSpoolExport", dependencies: ["TileSpoolCore", "TileSpoolIO", "CLinux", "CSQLite", "CZlib", "CDeflate"]),
        .target(name: "TileSpoolDaemon", dependencies: ["TileSpoolCore", "TileSpoolIO", "TileSpoolExport"]),
        .executableTarget(name: "tilespool", dependencies: ["TileSpoolCore", "TileSpoolIO", "TileSpoolExport", "TileSpoolDaemon", "CLinux"]),
        .testTarget(name: "TileSpoolTests",
                    dependencies: ["TileSpoolCore", "TileSpoolIO", "TileSpoolExport", "TileSpoolDaemon", "tilespool"]),
    ]
)
