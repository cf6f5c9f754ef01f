package drivers

// exampleContext is a realistic context for a driver: a cluster with a
// domain and storage classes, an environment with a backup location, two
// sibling deployments' services, and the driver's defaults for the
// parameters (a secret reference where one is required).
func exampleContext(d *Driver) Context {
	params := map[string]any{}
	for _, p := range d.Parameters {
		if p.Secret && !p.HasDefault && !p.Optional {
			params[p.Name] = SecretRef{Name: d.Name + "-secrets", Key: p.Name}
		}
	}
	applied, err := d.ApplyParameters(params)
	if err != nil {
		panic(err)
	}
	return Context{
		Cluster: ClusterContext{
			Name: "eu-1", Domain: "apps.example.com", IngressClass: "nginx",
			StorageClasses: map[string]string{"default": "standard", "fast": "ssd"},
		},
		Environment: EnvironmentContext{Name: "staging", Namespace: "staging", BackupLocation: "s3://backups/staging"},
		Deployment: DeploymentContext{
			Name: "hub", Namespace: "staging-hub", AppVersion: d.sampleAppVersion(),
			Driver: d.Name, DriverVersion: d.Version,
		},
		Parameters: applied,
		Services: map[string]map[string]Endpoint{
			"search": {"http": {Host: "search.staging-search.svc", Port: 9200, Protocol: "http", URL: "http://search.staging-search.svc:9200"}},
			"auth":   {"oidc": {Host: "auth.staging-auth.svc", Port: 8080, Protocol: "http", URL: "http://auth.staging-auth.svc:8080"}},
		},
	}
}
