package inspect

import (
	"fmt"
	"io"
)

// Reservation is one resource or pool of a NIC as its services reserve
// it: the NIC's maximum, what all its services reserve (system services
// included) and what is free. Pools are "LE pools" and "TLE pools".
type Reservation struct {
	NIC      string `json:"nic"`
	Resource string `json:"resource"`
	Max      int    `json:"max"`
	Reserved int    `json:"reserved"`
	Free     int    `json:"free"`
}

// writeReservations prints the reservations, one line per NIC and
// resource; nothing when there are none.
func writeReservations(w io.Writer, rs []Reservation) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nNIC\tRESOURCE\tRESERVED\tFREE\tMAX")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", r.NIC, r.Resource, r.Reserved, r.Free, r.Max)
	}
}
