package verify

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/zclconf/go-cty/cty"
)

// TestAWSModuleTLS checks modules/aws's tls input statically: its
// validation, the IAM policy (GetParameter under the parameter path only,
// kms:Decrypt through SSM only), the instance profile the nodes get, and
// that the node files come from redis-node's TLS profile.
func TestAWSModuleTLS(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	tlsObj := func(path, kms string) cty.Value {
		return cty.ObjectVal(map[string]cty.Value{"parameter_path": cty.StringVal(path), "kms_key_arn": nullableString(kms)})
	}
	for _, c := range []struct {
		v    cty.Value
		want bool
	}{
		{cty.NullVal(tlsType), true},
		{tlsObj("/redlock/prod/tls", ""), true},
		{tlsObj("/redlock/prod/tls", "arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"), true},
		{tlsObj("/redlock/prod/tls/", ""), false},
		{tlsObj("redlock/prod/tls", ""), false},
		{tlsObj("/redlock/prod tls", ""), false},
		{tlsObj("/redlock/prod/tls", "alias/aws/ssm"), false},
	} {
		if got := validates(t, m, "tls", c.v); got != c.want {
			t.Errorf("variable tls = %#v: validates %v, want %v", c.v, got, c.want)
		}
	}

	data := func(kms string) map[string]cty.Value {
		one := func(attr, v string) cty.Value {
			return cty.TupleVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{attr: cty.StringVal(v)})})
		}
		return map[string]cty.Value{"data": cty.ObjectVal(map[string]cty.Value{
			"aws_region":          cty.ObjectVal(map[string]cty.Value{"current": one("name", "eu-central-1")}),
			"aws_partition":       cty.ObjectVal(map[string]cty.Value{"current": one("partition", "aws")}),
			"aws_caller_identity": cty.ObjectVal(map[string]cty.Value{"current": one("account_id", "123456789012")}),
			"aws_kms_alias":       cty.ObjectVal(map[string]cty.Value{"ssm": one("target_key_arn", kms)}),
		})}
	}
	ssmKey := "arn:aws:kms:eu-central-1:123456789012:key/00000000-aaaa-bbbb-cccc-000000000000"
	ev := newEvaluator(t, m, map[string]cty.Value{"tls": tlsObj("/redlock/prod/tls", "")}, data(ssmKey))
	if got, want := ev.local("tls_parameter_arn").AsString(), "arn:aws:ssm:eu-central-1:123456789012:parameter/redlock/prod/tls/*"; got != want {
		t.Errorf("local.tls_parameter_arn = %q, want %q", got, want)
	}
	if got := ev.local("tls_kms_key_arn").AsString(); got != ssmKey {
		t.Errorf("local.tls_kms_key_arn without a key of its own = %q, want the aws/ssm key %q", got, ssmKey)
	}
	own := "arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	ev = newEvaluator(t, m, map[string]cty.Value{"tls": tlsObj("/redlock/prod/tls", own)}, data(ssmKey))
	if got := ev.local("tls_kms_key_arn").AsString(); got != own {
		t.Errorf("local.tls_kms_key_arn = %q, want tls.kms_key_arn %q", got, own)
	}

	// The policy: exactly two statements, neither with a wildcard action.
	doc := m.one(t, "data", "aws_iam_policy_document", "tls_read")
	want := map[string]string{"ssm:GetParameter": "local.tls_parameter_arn", "kms:Decrypt": "local.tls_kms_key_arn"}
	stmts := childBlocks(doc, "statement")
	if len(stmts) != len(want) {
		t.Errorf("tls_read has %d statements, want %d: %v", len(stmts), len(want), want)
	}
	for _, st := range stmts {
		actions := literal(t, m, st.Body.Attributes["actions"].Expr)
		if actions.LengthInt() != 1 {
			t.Errorf("tls_read statement with actions %s: want one action per statement", m.text(st.Body.Attributes["actions"].Expr))
			continue
		}
		action := actions.Index(cty.NumberIntVal(0)).AsString()
		res, ok := want[action]
		if !ok {
			t.Errorf("tls_read allows %s; want only %v", action, want)
			continue
		}
		if got := m.text(st.Body.Attributes["resources"].Expr); got != "["+res+"]" {
			t.Errorf("tls_read %s on %s, want [%s]", action, got, res)
		}
		if action == "kms:Decrypt" {
			conds := childBlocks(st, "condition")
			if len(conds) != 1 || literal(t, m, conds[0].Body.Attributes["variable"].Expr).AsString() != "kms:ViaService" {
				t.Error("tls_read kms:Decrypt must be limited to calls through SSM (condition kms:ViaService)")
			}
		}
	}
	for typ, name := range map[string]string{"aws_iam_role": "tls", "aws_iam_role_policy": "tls", "aws_iam_instance_profile": "tls"} {
		b := m.one(t, "resource", typ, name)
		if a := b.Body.Attributes["count"]; a == nil || !hasRef(a.Expr, "var.tls") {
			t.Errorf("%s.%s must exist only with tls (count on var.tls)", typ, name)
		}
	}
	if a := m.one(t, "resource", "aws_iam_role_policy", "tls").Body.Attributes["policy"]; a == nil || !hasRef(a.Expr, "data.aws_iam_policy_document.tls_read") {
		t.Error("aws_iam_role_policy.tls must carry data.aws_iam_policy_document.tls_read")
	}
	inst := m.one(t, "resource", "aws_instance", "this")
	if a := inst.Body.Attributes["iam_instance_profile"]; a == nil || !hasRef(a.Expr, "aws_iam_instance_profile.tls") {
		t.Error("aws_instance.this must use aws_iam_instance_profile.tls with tls")
	}
	call := m.one(t, "module", "redis_node")
	for attr, ref := range map[string]string{"tls": "local.tls_files", "tls_fetch_script": "local.tls_fetch_scripts"} {
		if a := call.Body.Attributes[attr]; a == nil || !hasRef(a.Expr, ref) {
			t.Errorf("module redis_node: %s must come from %s (the redis-node TLS profile)", attr, ref)
		}
	}
	// Nothing secret in the user data: the module has no input that could
	// carry a certificate's key into it.
	for _, v := range m.find("variable") {
		if regexp.MustCompile(`(?i)(private_key|key_pem|cert_pem|certificate)`).MatchString(v.Labels[0]) {
			t.Errorf("variable %s looks like key material: keys reach the nodes from SSM, never through Terraform", v.Labels[0])
		}
	}
}

// awsTLSFetchScript renders modules/aws's fetch script for node index as
// Terraform's templatefile would: the template interpolates plain names
// only, which this checks.
func awsTLSFetchScript(t *testing.T, vars map[string]string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(moduleDir(t, "aws"), "templates", "tls-fetch.sh.tftpl"))
	if err != nil {
		t.Fatal(err)
	}
	out := regexp.MustCompile(`\$\{([a-z_]+)\}`).ReplaceAllStringFunc(string(src), func(s string) string {
		name := s[2 : len(s)-1]
		v, ok := vars[name]
		if !ok {
			t.Errorf("tls-fetch.sh.tftpl uses ${%s}, which the module does not pass", name)
		}
		return v
	})
	if strings.Contains(out, "${") || strings.Contains(out, "%{") {
		t.Fatalf("tls-fetch.sh.tftpl has interpolations this test cannot render:\n%s", out)
	}
	return out
}

// tlsProfileProblems lists what makes a rendered node not TLS-only on
// port: plain TCP left on, TLS off or on another port, a file missing, or
// (with fetch) a unit that starts Redis before the files are fetched.
func tlsProfileProblems(n node, port int, fetch string) []string {
	var out []string
	directive := func(name string) []string {
		var vals []string
		for _, line := range strings.Split(n.RedisConf, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
				vals = append(vals, strings.Join(f[1:], " "))
			}
		}
		return vals
	}
	if p := directive("port"); !slices.Equal(p, []string{"0"}) {
		out = append(out, fmt.Sprintf("redis.conf: port %v: plain TCP must be off (port 0) on a TLS node", p))
	}
	if p := directive("tls-port"); !slices.Equal(p, []string{fmt.Sprint(port)}) {
		out = append(out, fmt.Sprintf("redis.conf: tls-port %v, want %d: the node must serve TLS on its port", p, port))
	}
	for _, d := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file"} {
		if len(directive(d)) != 1 {
			out = append(out, "redis.conf: "+d+" missing")
		}
	}
	if fetch != "" {
		if !strings.Contains(n.RedisUnit, "\nExecStartPre=+/usr/bin/systemctl start redlock-tls-fetch.service\n") {
			out = append(out, "unit: redlock-tls-fetch.service is not started before Redis: Redis would start before its certificate is there")
		}
		if !strings.Contains(n.TLSFetchUnit, "\nExecStart="+fetch+"\n") || strings.Contains(n.TLSFetchUnit, "\nIPAddressDeny") {
			out = append(out, "redlock-tls-fetch.service does not run "+fetch+" outside Redis's IP firewall")
		}
	}
	return out
}

// TestAWSTLSNodeRender renders a node as modules/aws does with tls: the
// redis-node TLS profile with the fetch script. The node must be TLS-only,
// its fetch script must be valid sh that reads SecureStrings, and its user
// data must name the parameters without holding anything secret. A copy
// left in plain text must be caught by the same check.
func TestAWSTLSNodeRender(t *testing.T) {
	const port = 6379
	files := map[string]string{"cert_file": "/etc/redis/tls/node.crt", "key_file": "/etc/redis/tls/node.key", "ca_file": "/etc/redis/tls/ca.crt"}
	vars := map[string]string{"tls_dir": "/etc/redis/tls", "region": "eu-central-1", "parameter_path": "/redlock/prod/tls", "index": "3"}
	for k, v := range files {
		vars[k] = v
	}
	script := awsTLSFetchScript(t, vars)
	nodes := render(t, map[string]map[string]any{"tls": {
		"bind_address":     "10.0.1.10",
		"port":             port,
		"max_lock_ttl":     30,
		"client_cidrs":     []string{"10.0.0.0/16"},
		"redlock_password": testRedlockPassword,
		"monitor_password": testMonitorPassword,
		"tls":              files,
		"tls_fetch_script": script,
		"extra_packages":   []string{"awscli"},
	}})
	n := nodes["tls"]
	if p := tlsProfileProblems(n, port, "/usr/local/sbin/redlock-tls-fetch"); len(p) > 0 {
		t.Errorf("the rendered TLS node:\n%s", strings.Join(p, "\n"))
	}

	// A node left in plain text, and one with TLS on another port, are caught.
	for name, conf := range map[string]string{
		"plain TCP left on": strings.Replace(strings.Replace(n.RedisConf, "port 0\n", fmt.Sprintf("port %d\n", port), 1), fmt.Sprintf("tls-port %d\n", port), "", 1),
		"both ports":        strings.Replace(n.RedisConf, "port 0\n", "port 6380\n", 1),
	} {
		broken := n
		broken.RedisConf = conf
		if conf == n.RedisConf {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		if p := tlsProfileProblems(broken, port, ""); len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), "plain TCP must be off") {
			t.Errorf("%s: check found %q, want the plain TCP port reported", name, p)
		}
	}
	broken := n
	broken.RedisUnit = strings.Replace(n.RedisUnit, "ExecStartPre=+/usr/bin/systemctl start redlock-tls-fetch.service\n", "", 1)
	if p := tlsProfileProblems(broken, port, "/usr/local/sbin/redlock-tls-fetch"); len(p) != 1 {
		t.Errorf("unit without the fetch: check found %q, want it reported", p)
	}

	var doc struct {
		Packages   []string `yaml:"packages"`
		WriteFiles []struct {
			Path        string `yaml:"path"`
			Permissions string `yaml:"permissions"`
			Content     string `yaml:"content"`
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(n.CloudInit), &doc); err != nil {
		t.Fatalf("decode user data: %v", err)
	}
	if !slices.Contains(doc.Packages, "awscli") {
		t.Errorf("packages %v: want awscli, for the fetch script", doc.Packages)
	}
	var fetched, unit string
	for _, f := range doc.WriteFiles {
		switch f.Path {
		case "/usr/local/sbin/redlock-tls-fetch":
			fetched = f.Content
			if f.Permissions != "0700" {
				t.Errorf("fetch script mode %s, want 0700", f.Permissions)
			}
		case "/etc/systemd/system/redlock-tls-fetch.service":
			unit = f.Content
		}
	}
	if unit != n.TLSFetchUnit || unit == "" {
		t.Errorf("the user data does not install redlock-tls-fetch.service as rendered:\n%s", unit)
	}
	if fetched != script {
		t.Errorf("the fetch script does not reach the node byte for byte:\n%s", fetched)
	}
	for _, want := range []string{"--with-decryption", "/redlock/prod/tls/ca.crt", "/redlock/prod/tls/node-3.crt", "/redlock/prod/tls/node-3.key", "--region eu-central-1"} {
		if !strings.Contains(script, want) {
			t.Errorf("fetch script lacks %q:\n%s", want, script)
		}
	}
	if regexp.MustCompile(`BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)`).MatchString(n.CloudInit) {
		t.Error("the user data carries PEM material: it must only name the parameters")
	}
	sh := requireProgram(t, "sh")
	path := writeFile(t, t.TempDir(), "redlock-tls-fetch", script, 0o700)
	if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
		t.Errorf("sh -n on the fetch script: %v\n%s", err, out)
	}
	// The fetch unit as systemd reads it, its ExecStart= pointed at the
	// script written here (the node's path does not exist on this host).
	analyze := requireProgram(t, "systemd-analyze")
	for name, unit := range map[string]string{
		"rendered": strings.Replace(n.TLSFetchUnit, "/usr/local/sbin/redlock-tls-fetch", path, 1),
		"control":  strings.Replace(strings.Replace(n.TLSFetchUnit, "/usr/local/sbin/redlock-tls-fetch", path, 1), "Type=oneshot", "Type=oneshotx", 1),
	} {
		upath := writeFile(t, t.TempDir(), "redlock-tls-fetch.service", unit, 0o644)
		out, err := runProgram(t, analyze, "verify", upath)
		bad := err != nil || strings.Contains(out, "redlock-tls-fetch.service")
		if bad != (name == "control") {
			t.Errorf("systemd-analyze verify on the %s fetch unit: %v\n%s\n%s", name, err, out, unit)
		}
	}
}
