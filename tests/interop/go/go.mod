module eureka-interop/fargo

go 1.21

require (
	github.com/hudl/fargo v1.4.0
	github.com/op/go-logging v0.0.0-20160315200505-970db520ece7
)

require (
	github.com/cenkalti/backoff/v4 v4.1.1 // indirect
	github.com/clbanning/mxj v1.8.4 // indirect
	github.com/franela/goreq v0.0.0-20171204163338-bcd34c9993f8 // indirect
	github.com/miekg/dns v1.1.43 // indirect
	golang.org/x/net v0.0.0-20210428140749-89ef3d95e781 // indirect
	golang.org/x/sys v0.0.0-20210423082822-04245dca01da // indirect
	gopkg.in/gcfg.v1 v1.2.3 // indirect
	gopkg.in/warnings.v0 v0.1.2 // indirect
)
