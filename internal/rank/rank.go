// Package rank is a multiset of integers that answers "how many are at least v" in
// O(log n): the order-statistics structure behind "read by N of M", where the integers are
// the members' read positions and a count must not scan 100,000 of them.
//
// It is a treap (a binary search tree kept balanced by random priorities) with one node
// per distinct value, each holding how many times its value is in the set and how many
// values its subtree holds. Members' positions cluster on a few seqs near the newest
// message, so the tree stays small.
package rank

import "math/rand/v2"

// Multiset is a multiset of int64. The zero value is empty and ready to use. It is not
// safe for concurrent use.
type Multiset struct {
	root *node
}

type node struct {
	value       int64
	count       int // how many times value is in the set
	size        int // values in this subtree, counts included
	prio        uint64
	left, right *node
}

func sizeOf(n *node) int {
	if n == nil {
		return 0
	}
	return n.size
}

func (n *node) fix() { n.size = n.count + sizeOf(n.left) + sizeOf(n.right) }

// Len returns how many values the set holds.
func (s *Multiset) Len() int { return sizeOf(s.root) }

// Add adds one v.
func (s *Multiset) Add(v int64) { s.root = add(s.root, v) }

func add(n *node, v int64) *node {
	if n == nil {
		return &node{value: v, count: 1, size: 1, prio: rand.Uint64()}
	}
	switch {
	case v < n.value:
		n.left = add(n.left, v)
		if n.left.prio > n.prio {
			n = rotateRight(n)
		}
	case v > n.value:
		n.right = add(n.right, v)
		if n.right.prio > n.prio {
			n = rotateLeft(n)
		}
	default:
		n.count++
	}
	n.fix()
	return n
}

// Remove removes one v, and reports whether there was one.
func (s *Multiset) Remove(v int64) bool {
	var ok bool
	s.root, ok = remove(s.root, v)
	return ok
}

func remove(n *node, v int64) (*node, bool) {
	if n == nil {
		return nil, false
	}
	var ok bool
	switch {
	case v < n.value:
		n.left, ok = remove(n.left, v)
	case v > n.value:
		n.right, ok = remove(n.right, v)
	default:
		ok = true
		if n.count > 1 {
			n.count--
		} else {
			return merge(n.left, n.right), true
		}
	}
	n.fix()
	return n, ok
}

// merge joins two treaps whose values are all smaller in a than in b.
func merge(a, b *node) *node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = merge(a.right, b)
		a.fix()
		return a
	}
	b.left = merge(a, b.left)
	b.fix()
	return b
}

func rotateRight(n *node) *node {
	l := n.left
	n.left, l.right = l.right, n
	n.fix()
	l.fix()
	return l
}

func rotateLeft(n *node) *node {
	r := n.right
	n.right, r.left = r.left, n
	n.fix()
	r.fix()
	return r
}

// AtLeast returns how many values of the set are at least v.
func (s *Multiset) AtLeast(v int64) int {
	total := 0
	for n := s.root; n != nil; {
		if v <= n.value {
			total += n.count + sizeOf(n.right)
			n = n.left
		} else {
			n = n.right
		}
	}
	return total
}
