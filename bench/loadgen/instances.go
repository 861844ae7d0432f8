package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// dirtyBase is the lastDirtyTimestamp of instance 0. Timestamps are fixed, not read from the
// clock, so a `renew` run can send the same lastDirtyTimestamp as the `register` run that came
// before it in another process: the server then answers 200, as it does for a real client.
const dirtyBase int64 = 1_717_000_000_000

// instance is one simulated client. Everything is derived from its index, so separate runs of
// the load generator agree on app names, ids and timestamps without sharing state.
type instance struct {
	App     string // upper-case, as the server stores it and as URLs carry it
	ID      string
	IP      string
	Port    int
	Dirty   int64
	vipName string
}

func newInstance(i, apps int) instance {
	appIdx := i % apps
	vip := fmt.Sprintf("bench-svc-%03d", appIdx)
	// 10.x.y.z with z in 1..250 so no address ends in .0 or .255.
	ip := fmt.Sprintf("10.%d.%d.%d", 100+(i/62500)%100, (i/250)%250, 1+i%250)
	port := 8080 + i%7
	return instance{
		App:     strings.ToUpper(vip),
		ID:      fmt.Sprintf("%s:%s:%d", ip, vip, port),
		IP:      ip,
		Port:    port,
		Dirty:   dirtyBase + int64(i),
		vipName: vip,
	}
}

func buildInstances(n, apps int) []instance {
	out := make([]instance, n)
	for i := range out {
		out[i] = newInstance(i, apps)
	}
	return out
}

// registrationBody is what the Netflix Java client (legacy Jackson codec) sends: the server's own
// output shape (protocol reference 3.1 / 3.8), timestamps and isCoordinatingDiscoveryServer as
// strings, @enabled as a string, and a Spring-style metadata map.
func (in instance) registrationBody() []byte {
	base := fmt.Sprintf("http://%s:%d", in.IP, in.Port)
	dirty := fmt.Sprint(in.Dirty)
	zone := []string{"zone-a", "zone-b", "zone-c"}[in.Port%3]
	doc := map[string]any{"instance": orderedInstance{
		{"instanceId", in.ID},
		{"hostName", in.IP},
		{"app", in.App},
		{"ipAddr", in.IP},
		{"status", "UP"},
		{"overriddenStatus", "UNKNOWN"},
		{"port", orderedInstance{{"$", in.Port}, {"@enabled", "true"}}},
		{"securePort", orderedInstance{{"$", 443}, {"@enabled", "false"}}},
		{"countryId", 1},
		{"dataCenterInfo", orderedInstance{
			{"@class", "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"},
			{"name", "MyOwn"},
		}},
		{"leaseInfo", orderedInstance{
			{"renewalIntervalInSecs", 30},
			{"durationInSecs", 90},
			{"registrationTimestamp", 0},
			{"lastRenewalTimestamp", 0},
			{"evictionTimestamp", 0},
			{"serviceUpTimestamp", 0},
		}},
		{"metadata", orderedInstance{
			{"management.port", fmt.Sprint(in.Port)},
			{"zone", zone},
			{"version", "1.4.2"},
		}},
		{"homePageUrl", base + "/"},
		{"statusPageUrl", base + "/actuator/info"},
		{"healthCheckUrl", base + "/actuator/health"},
		{"vipAddress", in.vipName},
		{"secureVipAddress", in.vipName},
		{"isCoordinatingDiscoveryServer", "false"},
		{"lastUpdatedTimestamp", dirty},
		{"lastDirtyTimestamp", dirty},
	}}
	body, err := json.Marshal(doc)
	if err != nil {
		panic(err) // only plain strings and ints above: cannot fail
	}
	return body
}

// orderedInstance marshals as a JSON object with its keys in the given order, as Jackson writes them.
type orderedInstance []kv

type kv struct {
	Key   string
	Value any
}

func (o orderedInstance) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(e.Key)
		if err != nil {
			return nil, err
		}
		value, err := json.Marshal(e.Value)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(value)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}
