// Package pcisysfs reads PCI functions from a sysfs tree: the one reader
// of the kernel's PCI attributes that cxi/sysfs (the Slingshot NICs) and
// gpu (the GPUs) share, so that both read an attribute the same way.
//
// Everything takes an [fs.FS] rooted at the sysfs root (os.DirFS("/sys")
// on a node, an on-disk mock tree or an [testing/fstest.MapFS] in tests)
// and paths relative to it. What it reads:
//
//   - the function's address ("0000:21:00.0"), from the basename of a
//     link to its directory, or PCI_SLOT_NAME in its uevent where links
//     cannot be read ([LinkedAddress]);
//   - vendor, device and class, numa_node, local_cpulist, the driver link,
//     the resource file (BAR sizes), and the SR-IOV physfn and virtfnN links
//     ([ReadFunction], which reads only the attributes asked for);
//   - the list of functions and each one's place in the PCIe hierarchy,
//     its root complex and the bridges above it ([Tree], [Topology]), from
//     the bus/pci/devices links, or from the directories below devices/
//     where those links are missing or cannot be read.
//
// The parsers ([ParseHex], [ParseAddress], [ParseNUMANode], ...) are pure
// functions of an attribute's text, never panic, and each has one fuzz
// target. Where the kernel prints a number they read it as the tools do
// (pciutils and libcxi use strtoul and atoi): zero padding and a leading
// '+' do not change the value; what is outside the attribute's range is
// refused.
//
// Errors name the file: an [*AttrError] whose cause matches [ErrMissing]
// when the file does not exist, or wraps [ErrInvalidValue] when its content
// is not what the kernel writes. Nothing here logs or starts goroutines;
// the functions are safe for concurrent use on a file system that is, and
// a [Tree] is for one goroutine.
package pcisysfs
