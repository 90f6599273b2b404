import FleetStorage
import FleetSupport
import Testing

@Suite struct StorageLocationTests {
    let keys = ["AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"]

    @Test func filesStayTheDefault() throws {
        #expect(try StorageLocation.load(from: [:]) == .files(root: ".data/images"))
        #expect(try StorageLocation.load(from: ["FLEET_STORAGE_ROOT": "/data/images"]) == .files(root: "/data/images"))
        #expect(try StorageLocation.load(from: ["FLEET_STORAGE": "file:///srv/images"]) == .files(root: "/srv/images"))
    }

    @Test func awsEndpointIsVirtualHostedInItsRegion() throws {
        var environment = keys
        environment["FLEET_STORAGE"] = "s3://wearbloom-images/fleet"
        environment["AWS_REGION"] = "eu-west-3"
        environment["AWS_SESSION_TOKEN"] = "token"
        guard case .s3(let settings) = try StorageLocation.load(from: environment) else { Issue.record("not s3"); return }
        #expect(settings.endpoint == S3Endpoint(scheme: .https, host: "s3.eu-west-3.amazonaws.com", region: "eu-west-3", bucket: "wearbloom-images", addressing: .virtualHosted))
        #expect(settings.prefix == "fleet/")
        #expect(settings.objectKey("u1/uploads/a.jpg") == "fleet/u1/uploads/a.jpg")
        #expect(settings.credentials.sessionToken == "token")
    }

    @Test func gatewayOnAnAddressIsPathStyle() throws {
        var environment = keys
        environment["FLEET_STORAGE"] = "s3://fleet-images"
        environment["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:17480"
        guard case .s3(let settings) = try StorageLocation.load(from: environment) else { Issue.record("not s3"); return }
        #expect(settings.endpoint == S3Endpoint(scheme: .http, host: "127.0.0.1", port: 17480, region: "us-east-1", bucket: "fleet-images", addressing: .pathStyle))
        #expect(settings.prefix == "")
    }

    @Test(arguments: [
        (["FLEET_STORAGE": "s3://b"], "FLEET_STORAGE"),
        (["FLEET_STORAGE": "s3://fleet-images"], "AWS_ACCESS_KEY_ID"),
        (["FLEET_STORAGE": "s3://fleet-images", "AWS_ACCESS_KEY_ID": "a"], "AWS_SECRET_ACCESS_KEY"),
        (["FLEET_STORAGE": "s3://fleet-images", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL_S3": "ftp://x"], "AWS_ENDPOINT_URL_S3"),
        (["FLEET_STORAGE": "s3://fleet-images", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "FLEET_S3_ADDRESSING": "dns"], "FLEET_S3_ADDRESSING"),
        (["FLEET_STORAGE": "gs://fleet-images"], "FLEET_STORAGE"),
        (["FLEET_STORAGE": "file://relative"], "FLEET_STORAGE"),
    ])
    func refusalsNameTheVariable(environment: [String: String], variable: String) {
        #expect {
            try StorageLocation.load(from: environment)
        } throws: { error in
            (error as? ConfigurationError)?.variable == variable
        }
    }

    /// The fallback and the copy's locations are written as `FLEET_STORAGE` is, or as a folder's path;
    /// a refusal names the variable (or option) it came from.
    @Test func fallbackAndCopyLocations() throws {
        #expect(try StorageLocation.loadFallback(from: [:]) == nil)
        #expect(try StorageLocation.loadFallback(from: ["FLEET_STORAGE_FALLBACK": "/data/images/"]) == .files(root: "/data/images"))
        #expect(try StorageLocation.loadFallback(from: ["FLEET_STORAGE_FALLBACK": "file:///data/images"]) == .files(root: "/data/images"))
        guard case .s3(let settings) = try StorageLocation.parse("s3://old-images/p", variable: "--from", environment: keys) else {
            Issue.record("not s3")
            return
        }
        #expect(settings.endpoint.bucket == "old-images" && settings.prefix == "p/")
        for (value, environment) in [("gs://b", keys), ("s3://B", keys), ("s3://old-images", [:])] {
            #expect {
                try StorageLocation.loadFallback(from: environment.merging(["FLEET_STORAGE_FALLBACK": value]) { $1 })
            } throws: { error in
                let variable = (error as? ConfigurationError)?.variable
                return value == "s3://old-images" ? variable == "AWS_ACCESS_KEY_ID" : variable == "FLEET_STORAGE_FALLBACK"
            }
        }
    }

    @Test func summaryNamesNoKey() throws {
        var environment = keys
        environment["FLEET_STORAGE"] = "s3://fleet-images/p"
        let summary = try StorageLocation.load(from: environment).summary
        #expect(!summary.contains("secret") && !summary.contains("AKIDEXAMPLE"))
    }
}
