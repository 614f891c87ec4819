// Package uapi is the user API of the HPE Slingshot CXI driver for CXI
// services: the exact command and response structures of
// include/uapi/ethernet/cxi-abi.h, encoded for x86_64 (little-endian,
// LP64), and a [Device] that writes them to /dev/cxiN.
//
// The driver's transport is one write(2) per command. The command starts
// with a 4-byte op code; most commands carry, at offset 8, a pointer to a
// response buffer that the kernel fills before write returns. The write
// returns the command's length on success or -errno. The driver insists on
// the exact size of each command (EINVAL otherwise), so every type here
// encodes to exactly the size that the C compiler gives the C struct,
// padding bytes zeroed. The golden tests pin sizes, offsets and bytes.
//
// The wire types ([SvcDesc], [FailInfo], [RsrcLimits], the command structs)
// are plain data with MarshalBinary/UnmarshalBinary and Decode functions;
// they do no I/O and are safe to use from any goroutine. Decode functions
// never panic on bad input; they return errors wrapping [ErrSize] or
// [ErrOp].
//
// A [Device] is safe for concurrent use when its writer is: the real
// character device is, and so is the simulated driver in package
// cxi/sim.
package uapi
