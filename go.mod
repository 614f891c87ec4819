module github.com/slingshot-k8s/slingshot

go 1.26.0
