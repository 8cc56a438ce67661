package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The Grafana dashboards are written by this file: grafana/*.json is its
// output (go generate ./dashboards), and a test fails when a file in git
// differs from it. Editing the JSON by hand would be undone; edit here.

//go:generate go run ./internal/gengrafana

// GrafanaFile is one generated dashboard file.
type GrafanaFile struct {
	Name string // base name in grafana/
	Data []byte
}

// Grafana returns the dashboards as the JSON files Grafana provisions.
func Grafana() ([]GrafanaFile, error) {
	var out []GrafanaFile
	for _, d := range []dashboard{redlockDashboard(), nodesDashboard()} {
		d.finish()
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("dashboards: %s: %w", d.UID, err)
		}
		out = append(out, GrafanaFile{Name: d.UID + ".json", Data: b.Bytes()})
	}
	return out, nil
}

// The subset of Grafana's dashboard model these dashboards use (schema
// version 39, Grafana 10/11).
type (
	dashboard struct {
		UID           string      `json:"uid"`
		Title         string      `json:"title"`
		Description   string      `json:"description"`
		Tags          []string    `json:"tags"`
		Editable      bool        `json:"editable"`
		GraphTooltip  int         `json:"graphTooltip"`
		Refresh       string      `json:"refresh"`
		SchemaVersion int         `json:"schemaVersion"`
		Version       int         `json:"version"`
		Timezone      string      `json:"timezone"`
		Time          timeRange   `json:"time"`
		Templating    templating  `json:"templating"`
		Annotations   annotations `json:"annotations"`
		Links         []link      `json:"links"`
		Panels        []*panel    `json:"panels"`
	}
	timeRange struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	templating struct {
		List []variable `json:"list"`
	}
	variable struct {
		Name       string         `json:"name"`
		Label      string         `json:"label"`
		Type       string         `json:"type"`
		Query      any            `json:"query"`
		Datasource *datasourceRef `json:"datasource,omitempty"`
		Definition string         `json:"definition,omitempty"`
		Refresh    int            `json:"refresh"`
		IncludeAll bool           `json:"includeAll"`
		Multi      bool           `json:"multi"`
		AllValue   string         `json:"allValue,omitempty"`
		Current    map[string]any `json:"current"`
		Sort       int            `json:"sort"`
		Hide       int            `json:"hide"`
	}
	annotations struct {
		List []annotation `json:"list"`
	}
	annotation struct {
		Name        string         `json:"name"`
		Datasource  *datasourceRef `json:"datasource"`
		Enable      bool           `json:"enable"`
		Hide        bool           `json:"hide"`
		IconColor   string         `json:"iconColor"`
		BuiltIn     int            `json:"builtIn,omitempty"`
		Type        string         `json:"type,omitempty"`
		Expr        string         `json:"expr,omitempty"`
		Step        string         `json:"step,omitempty"`
		TitleFormat string         `json:"titleFormat,omitempty"`
		TextFormat  string         `json:"textFormat,omitempty"`
		TagKeys     string         `json:"tagKeys,omitempty"`
		UseValueFor bool           `json:"useValueForTime"`
	}
	link struct {
		Title       string   `json:"title"`
		Type        string   `json:"type"`
		Tags        []string `json:"tags"`
		AsDropdown  bool     `json:"asDropdown"`
		IncludeVars bool     `json:"includeVars"`
		KeepTime    bool     `json:"keepTime"`
	}
	datasourceRef struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	gridPos struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	}
	panel struct {
		ID              int            `json:"id"`
		Type            string         `json:"type"`
		Title           string         `json:"title"`
		Description     string         `json:"description,omitempty"`
		GridPos         gridPos        `json:"gridPos"`
		Datasource      *datasourceRef `json:"datasource,omitempty"`
		Targets         []target       `json:"targets,omitempty"`
		FieldConfig     fieldConfig    `json:"fieldConfig"`
		Options         map[string]any `json:"options"`
		Repeat          string         `json:"repeat,omitempty"`
		RepeatDirection string         `json:"repeatDirection,omitempty"`
		MaxPerRow       int            `json:"maxPerRow,omitempty"`
		Transformations []any          `json:"transformations,omitempty"`
	}
	target struct {
		RefID        string         `json:"refId"`
		Datasource   *datasourceRef `json:"datasource"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Format       string         `json:"format"`
		Instant      bool           `json:"instant"`
		Range        bool           `json:"range"`
		Interval     string         `json:"interval,omitempty"`
	}
	fieldConfig struct {
		Defaults  fieldDefaults `json:"defaults"`
		Overrides []any         `json:"overrides"`
	}
	fieldDefaults struct {
		Unit       string         `json:"unit,omitempty"`
		Min        *float64       `json:"min,omitempty"`
		Max        *float64       `json:"max,omitempty"`
		Decimals   *int           `json:"decimals,omitempty"`
		Thresholds *thresholds    `json:"thresholds,omitempty"`
		Mappings   []any          `json:"mappings,omitempty"`
		Custom     map[string]any `json:"custom,omitempty"`
		Color      map[string]any `json:"color,omitempty"`
	}
	thresholds struct {
		Mode  string      `json:"mode"`
		Steps []threshold `json:"steps"`
	}
	threshold struct {
		Color string   `json:"color"`
		Value *float64 `json:"value"`
	}
)

// ds is every panel's data source: the dashboard's datasource variable, so
// that the dashboards work with whatever Prometheus Grafana knows.
var ds = &datasourceRef{Type: "prometheus", UID: "${datasource}"}

func f64(v float64) *float64 { return &v }
func intp(v int) *int        { return &v }

// finish numbers the panels in order.
func (d *dashboard) finish() {
	for i, p := range d.Panels {
		p.ID = i + 1
		for j := range p.Targets {
			p.Targets[j].RefID = string(rune('A' + j))
			p.Targets[j].Datasource = ds
		}
	}
}

func newDashboard(uid, title, description string) dashboard {
	return dashboard{
		UID: uid, Title: title, Description: description,
		Tags: []string{"redlock-lab"}, Editable: true, GraphTooltip: 1, Refresh: "10s",
		SchemaVersion: 39, Version: 1, Timezone: "browser",
		Time: timeRange{From: "now-30m", To: "now"},
		Templating: templating{List: []variable{{
			Name: "datasource", Label: "Prometheus", Type: "datasource", Query: "prometheus",
			Current: map[string]any{}, Refresh: 1,
		}}},
		Annotations: annotations{List: []annotation{
			{
				Name: "Annotations & Alerts", Datasource: &datasourceRef{Type: "grafana", UID: "-- Grafana --"},
				Enable: true, Hide: true, IconColor: "rgba(0, 211, 255, 1)", BuiltIn: 1, Type: "dashboard",
			},
			faultAnnotation,
		}},
		Links: []link{{Title: "Redlock lab", Type: "dashboards", Tags: []string{"redlock-lab"}, AsDropdown: true, IncludeVars: false, KeepTime: true}},
	}
}

// faultAnnotation shades every period a fault was in effect on a lab node:
// Grafana turns the consecutive points of each series into one region.
var faultAnnotation = annotation{
	Name: "Lab faults", Datasource: ds, Enable: true, IconColor: "rgba(255, 96, 96, 1)",
	Expr:        `max by (node, fault) (redlab_lab_fault_active) > 0`,
	Step:        "5s",
	TitleFormat: "{{fault}} on node {{node}}",
	TagKeys:     "fault,node",
}

// labelVariable is a query variable over a label's values, all selected by
// default.
func labelVariable(name, label, metric string) variable {
	q := fmt.Sprintf("label_values(%s, %s)", metric, name)
	return variable{
		Name: name, Label: label, Type: "query", Datasource: ds, Definition: q,
		Query:   map[string]any{"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
		Refresh: 2, IncludeAll: true, Multi: true, AllValue: ".*", Sort: 3,
		Current: map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}},
	}
}

func q(expr, legend string) target {
	return target{Expr: expr, LegendFormat: legend, Format: "time_series", Range: true}
}

func instantTable(expr string) target {
	return target{Expr: expr, LegendFormat: "__auto", Format: "table", Instant: true}
}

func heatmapQuery(expr string) target {
	return target{Expr: expr, LegendFormat: "{{le}}", Format: "heatmap", Range: true}
}

func timeseries(title, desc, unit string, pos gridPos, targets ...target) *panel {
	return &panel{
		Type: "timeseries", Title: title, Description: desc, GridPos: pos, Datasource: ds, Targets: targets,
		FieldConfig: fieldConfig{Defaults: fieldDefaults{Unit: unit, Custom: map[string]any{
			"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false,
		}}, Overrides: []any{}},
		Options: map[string]any{
			"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
	}
}

// stat shows one number, red from redAt on (nil: no colour rule).
func stat(title, desc, unit string, pos gridPos, redAt *float64, targets ...target) *panel {
	steps := []threshold{{Color: "green", Value: nil}}
	if redAt != nil {
		steps = append(steps, threshold{Color: "red", Value: redAt})
	}
	return &panel{
		Type: "stat", Title: title, Description: desc, GridPos: pos, Datasource: ds, Targets: targets,
		FieldConfig: fieldConfig{Defaults: fieldDefaults{
			Unit: unit, Decimals: intp(0), Thresholds: &thresholds{Mode: "absolute", Steps: steps},
		}, Overrides: []any{}},
		Options: map[string]any{
			"colorMode": "background", "graphMode": "none", "justifyMode": "auto", "textMode": "value_and_name",
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
		},
	}
}

func table(title, desc string, pos gridPos, t target, exclude ...string) *panel {
	ex := map[string]bool{"Time": true, "Value": true, "__name__": true}
	for _, e := range exclude {
		ex[e] = true
	}
	return &panel{
		Type: "table", Title: title, Description: desc, GridPos: pos, Datasource: ds, Targets: []target{t},
		FieldConfig: fieldConfig{Defaults: fieldDefaults{Custom: map[string]any{"align": "auto"}}, Overrides: []any{}},
		Options:     map[string]any{"showHeader": true, "cellHeight": "sm"},
		Transformations: []any{map[string]any{
			"id": "organize", "options": map[string]any{"excludeByName": ex, "indexByName": map[string]any{}, "renameByName": map[string]any{}},
		}},
	}
}

// faultsTimeline is the shaded bands of the lab's faults, one row per node
// and fault kind.
func faultsTimeline(pos gridPos) *panel {
	return &panel{
		Type: "state-timeline", Title: "Lab faults",
		Description: "redlab_lab_fault_active: red while a fault is in effect on a node (a kill lasts until the node answers again).",
		GridPos:     pos, Datasource: ds,
		Targets: []target{q(`max by (node, fault) (redlab_lab_fault_active)`, "node {{node}} {{fault}}")},
		FieldConfig: fieldConfig{Defaults: fieldDefaults{
			Min: f64(0), Max: f64(1),
			Thresholds: &thresholds{Mode: "absolute", Steps: []threshold{{Color: "transparent", Value: nil}, {Color: "red", Value: f64(1)}}},
			Color:      map[string]any{"mode": "thresholds"},
			Mappings: []any{map[string]any{"type": "value", "options": map[string]any{
				"0": map[string]any{"text": "-", "index": 0}, "1": map[string]any{"text": "fault", "index": 1},
			}}},
			Custom: map[string]any{"fillOpacity": 80, "lineWidth": 0},
		}, Overrides: []any{}},
		Options: map[string]any{
			"showValue": "never", "mergeValues": true, "alignValue": "left", "rowHeight": 0.9,
			"legend": map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": false},
		},
	}
}

func textPanel(title, markdown string, pos gridPos) *panel {
	return &panel{
		Type: "text", Title: title, GridPos: pos,
		FieldConfig: fieldConfig{Defaults: fieldDefaults{}, Overrides: []any{}},
		Options:     map[string]any{"mode": "markdown", "content": markdown},
	}
}

func heatmap(title, desc string, pos gridPos, t target) *panel {
	return &panel{
		Type: "heatmap", Title: title, Description: desc, GridPos: pos, Datasource: ds, Targets: []target{t},
		FieldConfig: fieldConfig{Defaults: fieldDefaults{Custom: map[string]any{
			"scaleDistribution": map[string]any{"type": "linear"},
		}}, Overrides: []any{}},
		Options: map[string]any{
			"calculate": false,
			"cellGap":   1,
			"color":     map[string]any{"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5, "steps": 64},
			"yAxis":     map[string]any{"axisPlacement": "left", "unit": "s"},
			"rowsFrame": map[string]any{"layout": "auto"},
			"tooltip":   map[string]any{"mode": "single", "yHistogram": false},
			"legend":    map[string]any{"show": true},
		},
	}
}

func at(x, y, w, h int) gridPos { return gridPos{H: h, W: w, X: x, Y: y} }

func redlockDashboard() dashboard {
	d := newDashboard("redlock-lab-locks", "Redlock lab: locks",
		"The lock as its clients see it: quorum health per node, acquire latency, outcomes, contention, validity, safety. Fault periods of the lab are shaded.")
	d.Templating.List = append(d.Templating.List, labelVariable("guard", "Guard", "redlock_attempts_total"),
		labelVariable("node", "Node", "redlock_node_request_duration_seconds_count"))
	d.Panels = []*panel{
		stat("Nodes answering the clients", "Nodes that answered at least half of the lock clients' requests over the last minute (redlab:redlock_nodes_answering:count_1m).", "none",
			at(0, 0, 5, 4), nil, q(`redlab:redlock_nodes_answering:count_1m`, "answering")),
		stat("Quorum", "Votes an attempt needs (redlock_quorum).", "none", at(5, 0, 3, 4), nil, q(`max(redlock_quorum)`, "quorum")),
		stat("Nodes up (exporters)", "Nodes whose redis-server answers its exporter.", "none", at(8, 0, 4, 4), nil,
			q(`redlab:redis_nodes_up:sum`, "up")),
		stat("Double grants", "Holds that overlapped another holder's (load generator's checker). Anything above 0 is a safety failure.", "none",
			at(12, 0, 4, 4), f64(1), q(`sum(redlab_load_double_grants_total) or vector(0)`, "double grants")),
		stat("Lock violations", "Double grants while both holders were inside their validity: the lock itself failed.", "none",
			at(16, 0, 4, 4), f64(1), q(`sum(redlab_load_lock_violations_total) or vector(0)`, "lock violations")),
		stat("Fenced rejections", "Stale holders' writes the store refused (redlock-fenced): the fence doing its work.", "none",
			at(20, 0, 4, 4), nil, q(`sum(redlab_inventory_fenced_rejections_total) or vector(0)`, "fenced")),

		faultsTimeline(at(0, 4, 24, 5)),

		timeseries("Quorum health per node",
			"Share of the lock clients' requests each node answered (granted or taken) over the last minute; abandoned requests count on neither side. Below 0.5 a node no longer helps any quorum.",
			"percentunit", at(0, 9, 12, 8), q(`node:redlock_node_answered:ratio_1m{node=~"$node"}`, "node {{node}}")),
		timeseries("Per-node request outcomes", "Acquire requests per second to each node, by outcome (granted, taken, error, timeout, abandoned).", "reqps",
			at(12, 9, 12, 8), q(`sum by (node, outcome) (rate(redlock_node_request_duration_seconds_count{op="acquire", node=~"$node"}[$__rate_interval]))`, "node {{node}} {{outcome}}")),

		timeseries("Acquire latency (granted)", "p50, p99 and p99.9 of granted acquires, retries and backoffs included, per guard.", "s",
			at(0, 17, 12, 8),
			q(`guard:redlock_acquire_duration_seconds:p50_1m{guard=~"$guard"}`, "{{guard}} p50"),
			q(`guard:redlock_acquire_duration_seconds:p99_1m{guard=~"$guard"}`, "{{guard}} p99"),
			q(`guard:redlock_acquire_duration_seconds:p999_1m{guard=~"$guard"}`, "{{guard}} p99.9")),
		timeseries("Acquire outcomes", "Acquire calls per second by result (granted, contended, unavailable, circuit_open, validity_exhausted, canceled).", "ops",
			at(12, 17, 12, 8), q(`sum by (guard, result) (rate(redlock_acquire_duration_seconds_count{guard=~"$guard"}[$__rate_interval]))`, "{{guard}} {{result}}")),

		repeatPerNode(heatmap("Node $node: acquire request latency", "Time to each node's answer to SET NX PX (granted or taken), one heatmap per node.",
			at(0, 25, 8, 8), heatmapQuery(`sum by (le) (rate(redlock_node_request_duration_seconds_bucket{op="acquire", outcome=~"granted|taken", node=~"$node"}[$__rate_interval]))`))),

		timeseries("Contention by guard", "Share of reservations turned away because the lock stayed taken for the whole acquire timeout.", "percentunit",
			at(0, 33, 8, 8), q(`guard:redlab_inventory_contended:ratio_1m{guard=~"$guard"}`, "{{guard}}")),
		timeseries("Reservations by outcome", "Reservations per second, by guard and outcome.", "ops",
			at(8, 33, 8, 8), q(`sum by (guard, outcome) (rate(redlab_inventory_reservations_total{guard=~"$guard"}[$__rate_interval]))`, "{{guard}} {{outcome}}")),
		timeseries("Retries per acquire", "Attempts beyond the first per acquire call; a rising line is the start of an overload collapse.", "none",
			at(16, 33, 8, 8), q(`guard:redlock_retries_per_acquire:ratio_1m{guard=~"$guard"}`, "{{guard}}")),

		timeseries("Validity left at grant", "Share of the TTL left when the lock was granted: the 1st percentile and the median. The drift allowance alone takes 1% + 2 ms.", "percentunit",
			at(0, 41, 8, 8),
			q(`guard:redlock_validity_remaining_ratio:p01_5m{guard=~"$guard"}`, "{{guard}} p1"),
			q(`guard:redlock_validity_remaining_ratio:p50_5m{guard=~"$guard"}`, "{{guard}} p50")),
		timeseries("Attempts short of a quorum", "Share of acquire attempts that got fewer granted votes than the quorum (quorum margin below 0): contention or missing nodes.", "percentunit",
			at(8, 41, 8, 8), q(`sum by (guard) (rate(redlock_quorum_margin_bucket{le="-1", guard=~"$guard"}[$__rate_interval])) / sum by (guard) (rate(redlock_quorum_margin_count{guard=~"$guard"}[$__rate_interval]))`, "{{guard}}")),
		timeseries("Circuit breaker", "Lock clients in each breaker state, and attempts it refused per second.", "none",
			at(16, 41, 8, 8),
			q(`sum by (guard, state) (redlock_circuit_breaker_state{guard=~"$guard"})`, "{{guard}} {{state}}"),
			q(`sum by (guard) (rate(redlock_circuit_breaker_rejected_total{guard=~"$guard"}[$__rate_interval]))`, "{{guard}} rejected/s")),

		timeseries("Releases and extensions", "Release and extend calls per second by result; not_held means the lock was gone before its release.", "ops",
			at(0, 49, 8, 8),
			q(`sum by (result) (rate(redlock_releases_total{guard=~"$guard"}[$__rate_interval]))`, "release {{result}}"),
			q(`sum by (result) (rate(redlock_extensions_total{guard=~"$guard"}[$__rate_interval]))`, "extend {{result}}")),
		timeseries("Node answer time p99", "p99 of each node's answers (granted or taken), by operation: a node slower than the others shows here before it costs a quorum.", "s",
			at(8, 49, 8, 8), q(`node_op:redlock_node_request_duration_seconds:p99_1m{node=~"$node"}`, "node {{node}} {{op}}")),
		timeseries("Store latency p99", "p99 of the store operations of a reservation, by operation.", "s",
			at(16, 49, 8, 8), q(`histogram_quantile(0.99, sum by (op, le) (rate(redlab_inventory_store_duration_seconds_bucket[$__rate_interval])))`, "{{op}}")),

		timeseries("Load: end-to-end latency", "From each operation's intended start (coordinated-omission corrected), as the load generator measures it.", "s",
			at(0, 57, 12, 8),
			q(`histogram_quantile(0.5, sum by (le) (rate(redlab_load_latency_seconds_bucket{histogram="e2e"}[$__rate_interval])))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(redlab_load_latency_seconds_bucket{histogram="e2e"}[$__rate_interval])))`, "p99")),
		timeseries("Load: operations and in flight", "Operations per second by outcome, and reservations in flight in the services.", "ops",
			at(12, 57, 12, 8),
			q(`sum by (outcome) (rate(redlab_load_operations_total[$__rate_interval])) > 0`, "{{outcome}}"),
			q(`sum(redlab_inventory_reservations_in_flight)`, "in flight")),
	}
	return d
}

// repeatPerNode makes Grafana draw p once per selected node, three a row.
func repeatPerNode(p *panel) *panel {
	p.Repeat, p.RepeatDirection, p.MaxPerRow = "node", "h", 3
	return p
}

// Node metrics come from redis_exporter, one per node, labelled node="N".
func nodesDashboard() dashboard {
	d := newDashboard("redlock-lab-nodes", "Redlock lab: nodes",
		"The lock nodes against the Redlock operating rules (redis_exporter): fsync policy, eviction policy, role, restarts, AOF fsync delays, and what can be said about clock skew.")
	d.Templating.List = append(d.Templating.List, labelVariable("node", "Node", "redis_up"))
	d.Panels = []*panel{
		table("appendfsync", "Rule: appendonly yes, appendfsync always.", at(0, 0, 6, 6),
			instantTable(`max by (node, value) (redis_config_key_value{key="appendfsync", node=~"$node"})`)),
		table("maxmemory-policy", "Rule: noeviction (a held lock's key must never be evicted).", at(6, 0, 6, 6),
			instantTable(`max by (node, value) (redis_config_key_value{key="maxmemory-policy", node=~"$node"})`)),
		table("Role", "Rule: every node a master with no replicas (independent nodes).", at(12, 0, 6, 6),
			instantTable(`max by (node, role) (redis_instance_info{node=~"$node"})`)),
		stat("Nodes up", "redis_up per node: 1 while redis-server answers its exporter.", "none", at(18, 0, 6, 6), nil,
			q(`redis_up{node=~"$node"}`, "node {{node}}")),

		faultsTimeline(at(0, 6, 24, 5)),

		timeseries("Restarts", "Crash restarts counted by the lab's supervisors, and redis-server starts seen by the exporters (a changed start time).", "none",
			at(0, 11, 8, 8),
			q(`increase(redlab_lab_node_restarts_total{node=~"$node"}[$__rate_interval])`, "node {{node}} crash restarts"),
			q(`changes(redis_start_time_seconds{node=~"$node"}[$__rate_interval])`, "node {{node}} starts")),
		timeseries("Downtime after a crash vs the longest TTL", "How long each node's last crash kept it from answering, against the longest lock TTL in use and the configured restart delay. Below the TTL, a node that lost writes can re-grant held locks.", "s",
			at(8, 11, 8, 8),
			q(`redlab_lab_node_crash_downtime_seconds{node=~"$node"}`, "node {{node}} downtime"),
			q(`redlab:lock_ttl_max:seconds`, "longest TTL"),
			q(`max(redlab_lab_node_restart_delay_seconds)`, "restart delay")),
		timeseries("Uptime", "Seconds since each redis-server started.", "s",
			at(16, 11, 8, 8), q(`redis_uptime_in_seconds{node=~"$node"}`, "node {{node}}")),

		timeseries("AOF fsyncs delayed", "fsyncs Redis had to delay because the disk was busy (aof_delayed_fsync), and fsyncs pending in the background.", "none",
			at(0, 19, 12, 8),
			q(`increase(redis_aof_delayed_fsync{node=~"$node"}[$__rate_interval])`, "node {{node}} delayed"),
			q(`redis_aof_pending_bio_fsync{node=~"$node"}`, "node {{node}} pending")),
		timeseries("AOF last write", "1 while the last AOF write succeeded; 0 means Redis refuses writes (and lock grants) on that node.", "none",
			at(12, 19, 12, 8), q(`redis_aof_last_write_status{node=~"$node"}`, "node {{node}}")),

		textPanel("Clock skew", clockSkewNote, at(0, 27, 8, 8)),
		timeseries("Clock offset (lab supervisors)", "Each node's TIME minus its supervisor's clock at the middle of the round trip, as redlab doctor measures it.", "s",
			at(8, 27, 16, 8), q(`redlab_lab_node_clock_offset_seconds{node=~"$node"}`, "node {{node}}")),

		timeseries("Keys evicted and expired", "Keys evicted (must stay 0 under noeviction) and keys expired per second.", "ops",
			at(0, 35, 8, 8),
			q(`rate(redis_evicted_keys_total{node=~"$node"}[$__rate_interval])`, "node {{node}} evicted"),
			q(`rate(redis_expired_keys_total{node=~"$node"}[$__rate_interval])`, "node {{node}} expired")),
		timeseries("Memory", "Memory used, and the maxmemory limit when one is set.", "bytes",
			at(8, 35, 8, 8),
			q(`redis_memory_used_bytes{node=~"$node"}`, "node {{node}} used"),
			q(`redis_memory_max_bytes{node=~"$node"} > 0`, "node {{node}} max")),
		timeseries("Lock commands per second", "SET, EVALSHA and EVAL calls on each node: the lock's traffic.", "ops",
			at(16, 35, 8, 8), q(`sum by (node, cmd) (rate(redis_commands_total{cmd=~"set|evalsha|eval", node=~"$node"}[$__rate_interval]))`, "node {{node}} {{cmd}}")),
		timeseries("Exporter scrape errors", "1 when the exporter's last scrape of its node failed (a refused login shows here).", "none",
			at(0, 43, 24, 6), q(`redis_exporter_last_scrape_error{node=~"$node"}`, "node {{node}}")),
	}
	return d
}

const clockSkewNote = `**No exporter metric gives a node's clock.** redis_exporter does not export
INFO's ` + "`server_time_usec`" + `, so Prometheus cannot compare the nodes' clocks.
What does:

- on VMs, chrony's own estimate: node_exporter's timex collector
  (` + "`node_timex_offset_seconds`" + `), not scraped by this lab;
- ` + "`redlab doctor`" + `, which compares every node's TIME with the client's;
- in the lab, the supervisors' ` + "`redlab_lab_node_clock_offset_seconds`" + ` (right), measured
  the way doctor does. Lab nodes share one clock, so it stays near 0; the
  clock faults are models applied to the keys' TTLs and show as bands above.`
