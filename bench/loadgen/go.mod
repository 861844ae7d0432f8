module eureka-bench/loadgen

go 1.22
