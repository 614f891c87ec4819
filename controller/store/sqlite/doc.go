// Package sqlite is the controller's embedded store: one sqlite database
// file in WAL mode with synchronous=FULL, so every committed batch is on
// disk (the WAL fsynced) before Commit returns. It uses the pure-Go
// modernc.org/sqlite driver, so static builds need no C toolchain.
//
// The schema is versioned with PRAGMA user_version and migrated forward on
// Open; a database written by a newer schema is refused rather than
// guessed at.
package sqlite
