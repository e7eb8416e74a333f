package conf_test

import (
	"fmt"
	"net/netip"

	"github.com/doorman-net/doorman/conf"
)

func ExampleParseEntry() {
	for _, s := range []string{"*.Bücher.de:443", "[2001:db8::1]:8000-8999", "10.1.2.3/8", "*"} {
		e, err := conf.ParseEntry(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(e.Kind, e)
	}
	// Output:
	// wildcard *.xn--bcher-kva.de:443
	// prefix [2001:db8::1]:8000-8999
	// "10.1.2.3/8": host bits set in prefix (did you mean 10.0.0.0/8, or the address 10.1.2.3?)
	// "*": a bare * is not allowed (use mode: open)
}

func ExamplePolicy_MatchName() {
	p, err := conf.ParseJSON([]byte(`{"type": "doorman", "allowedHosts": ["api.example.com:443", "*.github.com", "203.0.113.0/24"]}`))
	if err != nil {
		panic(err)
	}
	for _, sni := range []string{"API.example.com.", "codeload.github.com", "github.com"} {
		name, err := conf.NormalizeName(sni)
		if err != nil {
			panic(err)
		}
		if e, ok := p.MatchName(name, 443); ok {
			fmt.Println(name, "allowed by", e)
		} else {
			fmt.Println(name, "denied")
		}
	}
	if e, ok := p.MatchAddr(netip.MustParseAddr("203.0.113.9"), 22); ok {
		fmt.Println("203.0.113.9:22 allowed by", e)
	}
	// Output:
	// api.example.com allowed by api.example.com:443
	// codeload.github.com allowed by *.github.com
	// github.com denied
	// 203.0.113.9:22 allowed by 203.0.113.0/24
}

func ExampleParseFile() {
	p, err := conf.ParseFile([]byte(`# phase 2: the task itself
mode: allowlist
api.example.com
*.github.com:443   # git over https only
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(p)

	_, err = conf.ParseFile([]byte("x.com:0\nmode: deny\n"))
	fmt.Println(err)
	// Output:
	// allowlist [api.example.com *.github.com:443]
	// line 1: "x.com:0": port out of range: 0 (want 1-65535)
	// line 2: invalid mode "deny": want one of none, allowlist, open
}
