package throttle

// Local's key store: entries in Redis's three types, expiry heap, LRU bound.

import (
	"container/heap"
	"container/list"
)

// valueType is the Redis type a key's state has.
type valueType uint8

const (
	typeString valueType = iota + 1
	typeHash
	typeZset
)

// entry is one key's state.
type entry struct {
	key string
	typ valueType
	// typeString: a lone GCRA limit's bucket, else MinInterval's last
	// operation (µs).
	gcra *gcraBucket
	last int64
	hash *hashState // typeHash
	z    zset       // typeZset; nil until the first commit shapes it

	expires int64 // µs: when the Redis key's TTL would end (noTTL: none)
	idleAt  int64 // µs: from then on the state equals "unused"
	elem    *list.Element
	index   int // in Local.expiry
}

// hashState is a Redis hash of limiter state: window fields (present when
// their bit is set in has) and GCRA buckets by limit name.
type hashState struct {
	w, c, bw, b, p int64
	has            uint8
	gcra           map[string]*gcraBucket
}

const (
	hasW = 1 << iota
	hasC
	hasBW
	hasB
	hasP
)

// get returns v when the field is present, else 0 (the Lua's `or 0`).
func (h *hashState) get(bit uint8, v int64) int64 {
	if h.has&bit == 0 {
		return 0
	}
	return v
}

// hashOf returns e's hash, or nil; a key of another type sets d.replace, as
// a read that fails with WRONGTYPE in the Lua.
func hashOf(d *localDecision, e *entry) *hashState {
	if e == nil {
		return nil
	}
	if e.typ != typeHash {
		d.replace = true
		return nil
	}
	return e.hash
}

// zsetOf is hashOf for sorted sets.
func zsetOf(d *localDecision, e *entry) zset {
	if e == nil {
		return nil
	}
	if e.typ != typeZset {
		d.replace = true
		return nil
	}
	return e.z
}

// lookup returns key's entry, dropping it if it has expired, and marks it
// used.
func (l *Local) lookup(key string, now int64) *entry {
	e := l.keys[key]
	if e == nil {
		return nil
	}
	if e.expires <= now {
		l.remove(e)
		return nil
	}
	l.lru.MoveToFront(e.elem)
	return e
}

// put returns key's entry of type typ, creating it; a key of another type
// starts over (Redis DEL, or SET over any type).
func (l *Local) put(key string, typ valueType) *entry {
	e := l.keys[key]
	if e != nil && e.typ == typ {
		return e
	}
	if e != nil {
		l.remove(e)
	}
	e = &entry{key: key, typ: typ, expires: noTTL}
	if typ == typeHash {
		e.hash = &hashState{}
	}
	e.elem = l.lru.PushFront(e)
	heap.Push(&l.expiry, e)
	l.keys[key] = e
	return e
}

func (l *Local) delete(key string) {
	if e := l.keys[key]; e != nil {
		l.remove(e)
	}
}

func (l *Local) remove(e *entry) {
	delete(l.keys, e.key)
	l.lru.Remove(e.elem)
	heap.Remove(&l.expiry, e.index)
}

func (l *Local) setExpires(e *entry, at int64) {
	e.expires = at
	heap.Fix(&l.expiry, e.index)
}

// sweep drops up to n expired keys, soonest expired first.
func (l *Local) sweep(now int64, n int) {
	for ; n > 0 && len(l.expiry) > 0 && l.expiry[0].expires <= now; n-- {
		l.remove(l.expiry[0])
	}
}

// bound evicts keys until at most maxKeys remain: the key expiring soonest
// while its state equals "unused", else the least recently used key.
func (l *Local) bound(now int64) {
	for len(l.keys) > l.maxKeys {
		if e := l.expiry[0]; e.idleAt <= now {
			l.remove(e)
			continue
		}
		l.remove(l.lru.Back().Value.(*entry))
	}
}

// expiryHeap orders entries by expires (container/heap).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
