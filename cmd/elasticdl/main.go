// Command elasticdl trains models elastically: `elasticdl train` runs a
// job, and the job's own processes run `elasticdl worker` and `elasticdl ps`.
package main

import (
	"fmt"
	"os"

	"elasticdl/cli"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

func main() {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		fmt.Fprintln(os.Stderr, "elasticdl: model zoo:", err)
		os.Exit(1)
	}
	os.Exit(cli.Main(os.Args[1:], reg))
}
