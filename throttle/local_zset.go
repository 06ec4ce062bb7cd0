package throttle

// Local's sorted sets, in the shape of the algorithm that writes them.

import (
	"cmp"
	"container/list"
	"slices"
	"sort"
	"strconv"
)

// zset is a Redis sorted set of limiter state, scores in µs, in the shape
// of the algorithm that writes it (logSet, leaseSet, distinctSet), or a
// mixedSet when several algorithms wrote it.
type zset interface {
	// countAbove is ZCOUNT key (lo +inf.
	countAbove(lo int64) int64
	// kthAbove is the k-th lowest score (k from 1) above lo.
	kthAbove(lo, k int64) (int64, bool)
	// newest is the highest score; the set is not empty.
	newest() int64
	score(member string) (int64, bool)
	remove(member string) bool
	len() int
	// members lists every member (SlidingWindowLog entries under made-up
	// names), to convert to a mixedSet.
	members() []zmember
	// trim is ZREMRANGEBYSCORE key -inf upTo.
	trim(upTo int64)
	// add is ZADD: member name at score at; name "" adds n
	// SlidingWindowLog entries.
	add(name string, at, n int64)
}

type zmember struct {
	name  string
	score int64
}

// logSet is SlidingWindowLog's set: one entry per admitted unit, kept as
// runs of units admitted in the same microsecond, oldest first.
type logSet struct {
	runs  []logRun
	total int64
}

type logRun struct{ at, n int64 }

func (s *logSet) firstAbove(lo int64) int {
	return sort.Search(len(s.runs), func(i int) bool { return s.runs[i].at > lo })
}

func (s *logSet) countAbove(lo int64) int64 {
	i := s.firstAbove(lo)
	var n int64
	if i <= len(s.runs)/2 {
		n = s.total
		for _, r := range s.runs[:i] {
			n -= r.n
		}
		return n
	}
	for _, r := range s.runs[i:] {
		n += r.n
	}
	return n
}

func (s *logSet) kthAbove(lo, k int64) (int64, bool) {
	for _, r := range s.runs[s.firstAbove(lo):] {
		if k <= r.n {
			return r.at, true
		}
		k -= r.n
	}
	return 0, false
}

func (s *logSet) newest() int64              { return s.runs[len(s.runs)-1].at }
func (s *logSet) score(string) (int64, bool) { return 0, false } // members are "<call id>:<i>"
func (s *logSet) remove(string) bool         { return false }
func (s *logSet) len() int                   { return len(s.runs) }
func (s *logSet) trim(upTo int64)            { s.dropFirst(s.firstAbove(upTo)) }
func (s *logSet) dropFirst(i int)            { s.total -= sumRuns(s.runs[:i]); s.runs = s.runs[i:] }
func sumRuns(rs []logRun) (n int64) {
	for _, r := range rs {
		n += r.n
	}
	return n
}
func (s *logSet) members() (out []zmember) {
	for _, r := range s.runs {
		for range r.n {
			out = append(out, zmember{name: "\x00log:" + strconv.Itoa(len(out)), score: r.at})
		}
	}
	return out
}

// add records n units at at.
func (s *logSet) add(_ string, at, n int64) {
	i := s.firstAbove(at)
	if i > 0 && s.runs[i-1].at == at {
		s.runs[i-1].n += n
	} else {
		s.runs = slices.Insert(s.runs, i, logRun{at, n})
	}
	s.total += n
}

// leaseSet is Concurrency's set: lease id → expiry. It holds at most a
// few times Max leases, so it is a plain slice.
type leaseSet struct{ leases []zmember }

func (s *leaseSet) countAbove(lo int64) (n int64) {
	for _, m := range s.leases {
		if m.score > lo {
			n++
		}
	}
	return n
}

func (s *leaseSet) kthAbove(lo, k int64) (int64, bool) {
	var above []int64
	for _, m := range s.leases {
		if m.score > lo {
			above = append(above, m.score)
		}
	}
	if k < 1 || k > int64(len(above)) {
		return 0, false
	}
	slices.Sort(above)
	return above[k-1], true
}

func (s *leaseSet) newest() int64 {
	n := s.leases[0].score
	for _, m := range s.leases[1:] {
		n = max(n, m.score)
	}
	return n
}

func (s *leaseSet) score(id string) (int64, bool) {
	for _, m := range s.leases {
		if m.name == id {
			return m.score, true
		}
	}
	return 0, false
}

func (s *leaseSet) remove(id string) bool {
	for i, m := range s.leases {
		if m.name == id {
			s.leases = slices.Delete(s.leases, i, i+1)
			return true
		}
	}
	return false
}

func (s *leaseSet) len() int           { return len(s.leases) }
func (s *leaseSet) members() []zmember { return slices.Clone(s.leases) }
func (s *leaseSet) trim(upTo int64) {
	s.leases = slices.DeleteFunc(s.leases, func(m zmember) bool { return m.score <= upTo })
}
func (s *leaseSet) add(id string, at, _ int64) {
	for i := range s.leases {
		if s.leases[i].name == id {
			s.leases[i].score = at
			return
		}
	}
	s.leases = append(s.leases, zmember{id, at})
}

// distinctSet is Distinct's set: member → last admission, in a list by
// time (oldest first) with an index by member.
type distinctSet struct {
	order  list.List // of *zmember
	byName map[string]*list.Element
}

func newDistinctSet() *distinctSet { return &distinctSet{byName: map[string]*list.Element{}} }
func newLogSet() *logSet           { return &logSet{} }
func newLeaseSet() *leaseSet       { return &leaseSet{} }

func zscore(el *list.Element) int64 { return el.Value.(*zmember).score }

func (s *distinctSet) countAbove(lo int64) int64 {
	n := int64(len(s.byName))
	for el := s.order.Front(); el != nil && zscore(el) <= lo; el = el.Next() {
		n--
	}
	return n
}

func (s *distinctSet) kthAbove(lo, k int64) (int64, bool) {
	el := s.order.Front()
	for el != nil && zscore(el) <= lo {
		el = el.Next()
	}
	for ; el != nil; el = el.Next() {
		if k--; k == 0 {
			return zscore(el), true
		}
	}
	return 0, false
}

func (s *distinctSet) newest() int64 { return zscore(s.order.Back()) }

func (s *distinctSet) score(member string) (int64, bool) {
	if el := s.byName[member]; el != nil {
		return zscore(el), true
	}
	return 0, false
}

func (s *distinctSet) remove(member string) bool {
	el := s.byName[member]
	if el == nil {
		return false
	}
	s.order.Remove(el)
	delete(s.byName, member)
	return true
}

func (s *distinctSet) len() int { return len(s.byName) }

func (s *distinctSet) members() []zmember {
	out := make([]zmember, 0, len(s.byName))
	for el := s.order.Front(); el != nil; el = el.Next() {
		out = append(out, *el.Value.(*zmember))
	}
	return out
}

func (s *distinctSet) trim(upTo int64) {
	for el := s.order.Front(); el != nil && zscore(el) <= upTo; el = s.order.Front() {
		s.remove(el.Value.(*zmember).name)
	}
}

// add sets member's time to t, keeping the list in time order.
func (s *distinctSet) add(member string, t, _ int64) {
	el := s.byName[member]
	if el == nil {
		el = s.order.PushBack(&zmember{name: member, score: t})
		s.byName[member] = el
	} else {
		el.Value.(*zmember).score = t
		s.order.MoveToBack(el)
	}
	// Usually t is the newest time; a clock that went back needs a walk.
	for prev := el.Prev(); prev != nil && zscore(prev) > t; prev = el.Prev() {
		s.order.MoveBefore(el, prev)
	}
}

// shape returns e's set for a commit of one algorithm: in that
// algorithm's shape T (new when the key has none), or, when the key holds
// another algorithm's members (its limit was reconfigured), every member in
// a mixedSet, as Redis keeps them all in one sorted set.
func shape[T zset](e *entry, fresh func() T) zset {
	if e.z == nil {
		e.z = fresh()
		return e.z
	}
	if _, ok := e.z.(T); ok {
		return e.z
	}
	if _, ok := e.z.(*mixedSet); !ok {
		e.z = newMixedSet(e.z.members())
	}
	return e.z
}

// mixedSet is a sorted set that holds members of several algorithms, by
// name, lowest score first. Only keys whose limit changed algorithm use it.
type mixedSet struct {
	ms    []zmember
	units int // anonymous SlidingWindowLog entries named so far
}

func newMixedSet(ms []zmember) *mixedSet {
	slices.SortStableFunc(ms, func(a, b zmember) int { return cmp.Compare(a.score, b.score) })
	return &mixedSet{ms: ms}
}

func (s *mixedSet) firstAbove(lo int64) int {
	return sort.Search(len(s.ms), func(i int) bool { return s.ms[i].score > lo })
}

func (s *mixedSet) countAbove(lo int64) int64 { return int64(len(s.ms) - s.firstAbove(lo)) }

func (s *mixedSet) kthAbove(lo, k int64) (int64, bool) {
	i := int64(s.firstAbove(lo)) + k - 1
	if k < 1 || i >= int64(len(s.ms)) {
		return 0, false
	}
	return s.ms[i].score, true
}

func (s *mixedSet) newest() int64 { return s.ms[len(s.ms)-1].score }

func (s *mixedSet) score(name string) (int64, bool) {
	if i := slices.IndexFunc(s.ms, func(m zmember) bool { return m.name == name }); i >= 0 {
		return s.ms[i].score, true
	}
	return 0, false
}

func (s *mixedSet) remove(name string) bool {
	n := len(s.ms)
	s.ms = slices.DeleteFunc(s.ms, func(m zmember) bool { return m.name == name })
	return len(s.ms) < n
}

func (s *mixedSet) len() int           { return len(s.ms) }
func (s *mixedSet) members() []zmember { return slices.Clone(s.ms) }
func (s *mixedSet) trim(upTo int64)    { s.ms = s.ms[s.firstAbove(upTo):] }

func (s *mixedSet) add(name string, at, n int64) {
	if name != "" {
		s.remove(name)
		s.ms = slices.Insert(s.ms, s.firstAbove(at), zmember{name, at})
		return
	}
	for range n {
		s.units++
		s.ms = slices.Insert(s.ms, s.firstAbove(at), zmember{"\x00unit:" + strconv.Itoa(s.units), at})
	}
}
