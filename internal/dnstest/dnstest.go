// Package dnstest serves DNS answers in process, so tests that resolve
// names (the egress check at enqueue) depend on no DNS server and no
// /etc/hosts.
package dnstest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// Public is an address no egress range refuses (example.com's), for names
// a test only needs to resolve.
var Public = netip.MustParseAddr("93.184.215.14")

// Resolver returns a *net.Resolver that answers in process: a name in
// answers (lower case, no trailing dot) with its address, any other name
// with fallback; an invalid address (netip.Addr{}) answers NXDOMAIN. A
// name's A query gets its IPv4 address and its AAAA query its IPv6 one;
// the other family has no record.
func Resolver(answers map[string]netip.Addr, fallback netip.Addr) *net.Resolver {
	return Server{Answers: answers, Fallback: fallback}.Resolver()
}

// Server is an in-process DNS server's answers: Answers and Fallback as
// Resolver takes them; RCode, when not 0 (success), is every answer's
// response code, with no record (dnsmessage.RCodeServerFailure for a DNS
// fault); Lookups, when not nil, counts the questions answered.
type Server struct {
	Answers  map[string]netip.Addr
	Fallback netip.Addr
	RCode    dnsmessage.RCode
	Lookups  *atomic.Int64
}

// Resolver returns a *net.Resolver that s answers.
func (s Server) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go s.serve(server)
		return client, nil
	}}
}

// serve answers one query on conn. A net.Pipe is not a PacketConn, so the
// Go resolver frames messages as over TCP: a 2-byte length first.
func (s Server) serve(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil || n < 2 {
		return
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[2:n])
	if err != nil {
		return
	}
	q, err := p.Question()
	if err != nil {
		return
	}
	if s.Lookups != nil {
		s.Lookups.Add(1)
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	addr, ok := s.Answers[name]
	if !ok {
		addr = s.Fallback
	}
	hdr := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionAvailable: true}
	switch {
	case s.RCode != dnsmessage.RCodeSuccess:
		hdr.RCode, addr = s.RCode, netip.Addr{}
	case !addr.IsValid():
		hdr.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, hdr)
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
	switch {
	case q.Type == dnsmessage.TypeA && addr.Is4():
		_ = b.AResource(rh, dnsmessage.AResource{A: addr.As4()})
	case q.Type == dnsmessage.TypeAAAA && addr.Is6():
		_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: addr.As16()})
	}
	out, err := b.Finish()
	if err != nil {
		return
	}
	_, _ = conn.Write(append([]byte{byte(len(out) >> 8), byte(len(out))}, out...))
}
