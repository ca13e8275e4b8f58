package sqldb

import (
	"strings"
	"testing"
)

func TestCheckPacket(t *testing.T) {
	for _, c := range []struct {
		size, limit int64
		want        string
	}{
		{1 << 20, 16 << 20, ""},
		{16<<20 - 1024, 16 << 20, ""},
		{16<<20 - 1023, 16 << 20, "SET GLOBAL max_allowed_packet = 17825792"},
		{20 << 20, 16 << 20, "the model is 20.0 MiB, more than the server's max_allowed_packet of 16.0 MiB"},
	} {
		err := checkPacket(c.size, c.limit)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkPacket(%d, %d) = %v, want %q", c.size, c.limit, err, c.want)
		}
	}
}
