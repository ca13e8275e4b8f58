package client

import (
	"errors"
	"fmt"

	"elasticdl/internal/ps/shard"
	"elasticdl/nn"
)

// ShardOf returns the index of the PS shard holding the parameter called
// name: FNV-1a 32 of the name's bytes, modulo numPS. Workers and servers
// must agree on it and it must never change. It panics when numPS < 1.
func ShardOf(name string, numPS int) int { return shard.Of(name, numPS) }

// layout is params split by shard; immutable once built.
type layout struct {
	params []*nn.Param
	groups [][]*nn.Param
	byName []map[string]*nn.Param
}

// layoutFor returns the split of params, reusing the last one when called
// with the same parameters again (the usual case: a worker passes its
// model's parameter list every step).
func (c *Client) layoutFor(params []*nn.Param) (*layout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.layout; l != nil && len(l.params) == len(params) {
		same := true
		for i, p := range params {
			if l.params[i] != p {
				same = false
				break
			}
		}
		if same {
			return l, nil
		}
	}
	l := &layout{
		params: append([]*nn.Param(nil), params...),
		groups: make([][]*nn.Param, len(c.shards)),
		byName: make([]map[string]*nn.Param, len(c.shards)),
	}
	for i := range l.byName {
		l.byName[i] = map[string]*nn.Param{}
	}
	for _, p := range params {
		if p == nil || p.Name == "" {
			return nil, errors.New("ps client: nil or unnamed parameter")
		}
		i := ShardOf(p.Name, len(c.shards))
		if _, dup := l.byName[i][p.Name]; dup {
			return nil, fmt.Errorf("ps client: parameter %q given twice", p.Name)
		}
		l.byName[i][p.Name] = p
		l.groups[i] = append(l.groups[i], p)
	}
	c.layout = l
	return l, nil
}
