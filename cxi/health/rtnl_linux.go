//go:build linux

package health

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// subscribeLinksAt returns a [linkSubscriber] for the link messages of the
// network namespace ns, or of the calling thread's namespace when ns is nil.
// The library decodes the messages; a goroutine per subscription turns its
// updates into [linkUpdate]s and ends when the library closes its channel,
// which it does once done is closed.
func subscribeLinksAt(ns *netns.NsHandle) linkSubscriber {
	return func(done <-chan struct{}, onErr func(error)) (<-chan linkUpdate, error) {
		raw := make(chan netlink.LinkUpdate)
		err := netlink.LinkSubscribeWithOptions(raw, done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onErr})
		if err != nil {
			return nil, fmt.Errorf("subscribe to rtnetlink link messages: %w", err)
		}
		out := make(chan linkUpdate)
		go func() {
			defer close(out)
			// Ranging to the end, also after done, drains what the library
			// still sends: it blocks on its channel and does not watch done.
			for u := range raw {
				lu, ok := linkUpdateOf(u)
				if !ok {
					continue
				}
				select {
				case out <- lu:
				case <-done:
				}
			}
		}()
		return out, nil
	}
}

// linkUpdateOf takes what the monitor needs from a decoded link message. ok
// is false for a message without a link name, which no watched netdev has.
func linkUpdateOf(u netlink.LinkUpdate) (lu linkUpdate, ok bool) {
	if u.Link == nil || u.Attrs() == nil || u.Attrs().Name == "" {
		return linkUpdate{}, false
	}
	a := u.Attrs()
	return linkUpdate{
		Index:   int32(a.Index),
		Name:    a.Name,
		Deleted: u.Header.Type == unix.RTM_DELLINK,
		AdminUp: u.IfInfomsg.Flags&unix.IFF_UP != 0,
		Oper:    operStateName(uint8(a.OperState)),
	}, true
}
